/**
 * The whole index as SQLite's migrations 001–005 leave it, table for table and column for column
 * (src/db/sqlite/migrations/): sizes and ms timestamps are BIGINT, flags 0/1 INTEGER, JSON TEXT. Keys and
 * names sort bytewise (COLLATE "C"), as SQLite's BINARY collation does, so pages and lists come out
 * in the same order on both.
 *
 * The functions below are the transactions that must decide something under a lock: each runs as
 * one statement, so one round trip, and each of its statements sees what was committed before it
 * (READ COMMITTED takes a snapshot per statement inside a volatile function), which is what makes
 * the per-oid advisory lock and the lock-row re-read meaningful.
 */
export const sql = `
CREATE TABLE objects (
  oid         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  size        BIGINT NOT NULL,            -- logical bytes
  stored_size BIGINT NOT NULL,            -- bytes in the store
  created_at  BIGINT NOT NULL             -- ms since epoch
);

CREATE TABLE repo_objects (
  repo       TEXT COLLATE "C" NOT NULL,   -- "org/repo"
  oid        TEXT COLLATE "C" NOT NULL REFERENCES objects(oid),
  created_at BIGINT NOT NULL,
  PRIMARY KEY (repo, oid)
);
CREATE INDEX repo_objects_by_oid ON repo_objects(oid);

-- seq is an identity, never reused: lock list cursors stay exact across deletes. The unique
-- (repo, path) index is what lets exactly one of any number of racing creates win.
CREATE TABLE locks (
  seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id         TEXT COLLATE "C" NOT NULL UNIQUE,
  repo       TEXT COLLATE "C" NOT NULL,
  path       TEXT COLLATE "C" NOT NULL,
  ref        TEXT,
  owner_id   TEXT NOT NULL,
  owner_name TEXT NOT NULL,
  locked_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX locks_by_repo_path ON locks(repo, path);
CREATE INDEX locks_by_repo_seq ON locks(repo, seq);

CREATE TABLE sessions (
  id_hash    TEXT NOT NULL PRIMARY KEY,   -- sha256 of the cookie value; the raw id is never stored
  user_id    TEXT NOT NULL,
  user_name  TEXT NOT NULL,
  via        TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_by_expiry ON sessions(expires_at);

CREATE TABLE settings (
  key        TEXT NOT NULL PRIMARY KEY,
  value      TEXT NOT NULL,               -- JSON
  updated_at BIGINT NOT NULL,
  updated_by TEXT NOT NULL
);

CREATE TABLE stats_samples (
  at             BIGINT NOT NULL PRIMARY KEY,
  repositories   BIGINT NOT NULL,
  objects        BIGINT NOT NULL,
  logical_bytes  BIGINT NOT NULL,
  stored_bytes   BIGINT NOT NULL,
  uploads        BIGINT NOT NULL,
  upload_bytes   BIGINT NOT NULL,
  downloads      BIGINT NOT NULL,
  download_bytes BIGINT NOT NULL,
  rejections     TEXT NOT NULL            -- JSON {cause: count}
);

CREATE TABLE repo_audits (
  repo        TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  finished_at BIGINT NOT NULL,
  objects     BIGINT NOT NULL,
  bytes       BIGINT NOT NULL,
  corrupt     BIGINT NOT NULL,
  unreadable  BIGINT NOT NULL,
  complete    INTEGER NOT NULL            -- 1 when the whole repository was covered
);

CREATE TABLE jobs (
  id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  kind          TEXT NOT NULL,
  repo          TEXT COLLATE "C" NOT NULL,
  state         TEXT NOT NULL,            -- running | done | failed | cancelled | interrupted
  dry_run       INTEGER NOT NULL,
  objects_done  BIGINT NOT NULL,
  objects_total BIGINT,
  bytes_done    BIGINT NOT NULL,
  bytes_total   BIGINT,
  report        TEXT,                     -- JSON, once done
  error         TEXT,
  started_at    BIGINT NOT NULL,
  finished_at   BIGINT,
  node          TEXT NOT NULL DEFAULT ''  -- the node running (or that ran) it
);
CREATE INDEX jobs_by_started ON jobs(started_at);

CREATE TABLE quarantine (
  oid    TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  repo   TEXT NOT NULL,
  reason TEXT NOT NULL,
  at     BIGINT NOT NULL
);

CREATE TABLE pending_deletes (
  oid  TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  at   BIGINT NOT NULL,
  node TEXT NOT NULL DEFAULT ''           -- the node deleting the bytes
);

-- Liveness: a node is live while its heartbeat is recent (callers pass now - NODE_STALE_MS).
CREATE TABLE nodes (
  node    TEXT NOT NULL PRIMARY KEY,
  seen_at BIGINT NOT NULL
);

-- One maintenance job per repository across the cluster: the node holding the row runs it.
CREATE TABLE job_leases (
  repo TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  node TEXT NOT NULL,
  at   BIGINT NOT NULL
);

CREATE TABLE uploads_in_flight (
  ticket BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  oid    TEXT COLLATE "C" NOT NULL,
  node   TEXT NOT NULL,
  at     BIGINT NOT NULL
);
CREATE INDEX uploads_in_flight_by_oid ON uploads_in_flight(oid);

-- Lock create: insert unless (repo, path) is held; a held lock older than p_stale_before is
-- replaced in the same transaction. Rows: ('created', new) | ('conflict', held) |
-- ('taken_over', new) + ('previous', replaced).
CREATE FUNCTION stowage_lock_create(p_id TEXT, p_repo TEXT, p_path TEXT, p_ref TEXT, p_owner_id TEXT, p_owner_name TEXT, p_locked_at BIGINT, p_stale_before BIGINT)
RETURNS TABLE (outcome TEXT, seq BIGINT, id TEXT, repo TEXT, path TEXT, ref TEXT, owner_id TEXT, owner_name TEXT, locked_at BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  held locks%ROWTYPE;
  made locks%ROWTYPE;
BEGIN
  LOOP
    INSERT INTO locks AS l (id, repo, path, ref, owner_id, owner_name, locked_at)
      VALUES (p_id, p_repo, p_path, p_ref, p_owner_id, p_owner_name, p_locked_at)
      ON CONFLICT (repo, path) DO NOTHING RETURNING l.* INTO made;
    IF made.seq IS NOT NULL THEN
      RETURN QUERY SELECT 'created'::TEXT, made.seq, made.id, made.repo, made.path, made.ref, made.owner_id, made.owner_name, made.locked_at;
      RETURN;
    END IF;
    -- FOR UPDATE reads the latest committed row and holds it: of two racing takeovers, the second
    -- finds it gone and goes round again, into the first one's new lock.
    SELECT * INTO held FROM locks l WHERE l.repo = p_repo AND l.path = p_path FOR UPDATE;
    IF held.seq IS NOT NULL THEN
      IF p_stale_before IS NULL OR held.locked_at >= p_stale_before THEN
        RETURN QUERY SELECT 'conflict'::TEXT, held.seq, held.id, held.repo, held.path, held.ref, held.owner_id, held.owner_name, held.locked_at;
        RETURN;
      END IF;
      DELETE FROM locks l WHERE l.seq = held.seq;
      INSERT INTO locks AS l (id, repo, path, ref, owner_id, owner_name, locked_at)
        VALUES (p_id, p_repo, p_path, p_ref, p_owner_id, p_owner_name, p_locked_at) RETURNING l.* INTO made;
      RETURN QUERY SELECT 'taken_over'::TEXT, made.seq, made.id, made.repo, made.path, made.ref, made.owner_id, made.owner_name, made.locked_at
        UNION ALL SELECT 'previous'::TEXT, held.seq, held.id, held.repo, held.path, held.ref, held.owner_id, held.owner_name, held.locked_at;
      RETURN;
    END IF;
  END LOOP;
END $$;

-- The upload side of the upload/delete handshake: record the write in flight, then look for a
-- deletion intent, under the oid's lock (the same one stowage_drop_reference takes). Also says
-- whether the oid is quarantined, which the upload path would otherwise ask in a round trip of its own.
CREATE FUNCTION stowage_begin_upload(p_oid TEXT, p_node TEXT, p_at BIGINT)
RETURNS TABLE (ticket BIGINT, delete_pending BOOLEAN, quarantined BOOLEAN)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  t BIGINT;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_oid, 0));
  INSERT INTO uploads_in_flight AS u (oid, node, at) VALUES (p_oid, p_node, p_at) RETURNING u.ticket INTO t;
  RETURN QUERY SELECT t, EXISTS (SELECT 1 FROM pending_deletes d WHERE d.oid = p_oid), EXISTS (SELECT 1 FROM quarantine q WHERE q.oid = p_oid);
END $$;

-- The delete side: drop the reference; when it was the last, the object row and any quarantine
-- mark go too and, unless a live node is writing the oid, a deletion intent naming the deleting
-- node is recorded.
CREATE FUNCTION stowage_drop_reference(p_repo TEXT, p_oid TEXT, p_live_since BIGINT, p_node TEXT, p_at BIGINT)
RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_oid, 0));
  DELETE FROM repo_objects r WHERE r.repo = p_repo AND r.oid = p_oid;
  IF EXISTS (SELECT 1 FROM repo_objects r WHERE r.oid = p_oid) THEN
    RETURN 'kept';
  END IF;
  DELETE FROM objects o WHERE o.oid = p_oid;
  DELETE FROM quarantine q WHERE q.oid = p_oid;
  IF EXISTS (SELECT 1 FROM uploads_in_flight u JOIN nodes n ON n.node = u.node WHERE u.oid = p_oid AND n.seen_at >= p_live_since) THEN
    RETURN 'in_flight';
  END IF;
  INSERT INTO pending_deletes AS d (oid, at, node) VALUES (p_oid, p_at, p_node) ON CONFLICT (oid) DO UPDATE SET at = EXCLUDED.at, node = EXCLUDED.node;
  RETURN 'delete';
END $$;
`;

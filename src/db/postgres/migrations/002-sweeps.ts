/**
 * Retain sweeps (see NodeIndex in index-types.ts): uploads record themselves in flight only while a
 * sweep is open, a sweep deletes only once every live node acknowledged it, and an upload's
 * reference is refused when a sweep its node missed has started deleting. Also the one statement
 * that records references (with the upload's in-flight row ended in the same transaction), and the
 * decision on a leftover deletion intent, both under the per-oid advisory lock the handshake uses.
 */
export const sql = `
ALTER TABLE nodes ADD COLUMN acked_sweep BIGINT NOT NULL DEFAULT 0;

CREATE TABLE sweeps (
  sweep     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  node      TEXT NOT NULL,                 -- the node whose retain opened it
  opened_at BIGINT NOT NULL,
  deleting  BOOLEAN NOT NULL DEFAULT false, -- every live node acknowledged: deletes may run
  closed_at BIGINT
);

-- References of uploads finishing together, one statement: per row (by position, from 1) 'ok', 'quarantined' (the oid is
-- quarantined and the store kept the copy it already had, unverified: nothing recorded, the caller
-- moves the bad copy aside), 'sweep_missed' (every row: a sweep this node never acknowledged is
-- deleting) or 'settings_changed' (every row: the setting p_setting_key is no longer saved as
-- p_setting_value, the text the uploads were judged by; a null key checks nothing). An 'ok' row's
-- in-flight ticket is ended in the same transaction.
CREATE FUNCTION stowage_add_references(p_repos TEXT[], p_oids TEXT[], p_sizes BIGINT[], p_stored BIGINT[], p_verified BOOLEAN[], p_tickets BIGINT[], p_acked BIGINT, p_setting_key TEXT, p_setting_value TEXT, p_at BIGINT)
RETURNS TABLE (n BIGINT, outcome TEXT)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  -- Every oid's lock, in one order on every node (no deadlock between batches), so a drop or an
  -- intent's settlement sees either the in-flight row or the reference, never neither.
  PERFORM pg_advisory_xact_lock(hashtextextended(x.o, 0)) FROM (SELECT DISTINCT u.o FROM unnest(p_oids) AS u(o) ORDER BY u.o) x;
  IF EXISTS (SELECT 1 FROM sweeps s WHERE s.sweep > p_acked AND s.deleting) THEN
    RETURN QUERY SELECT u.n, 'sweep_missed'::text FROM unnest(p_oids) WITH ORDINALITY AS u(o, n);
    RETURN;
  END IF;
  IF p_setting_key IS NOT NULL AND (SELECT s.value FROM settings s WHERE s.key = p_setting_key) IS DISTINCT FROM p_setting_value THEN
    RETURN QUERY SELECT u.n, 'settings_changed'::text FROM unnest(p_oids) WITH ORDINALITY AS u(o, n);
    RETURN;
  END IF;
  RETURN QUERY
  WITH input AS (
    SELECT t.n, t.repo, t.oid, t.size, t.stored_size, t.ticket,
           (NOT t.verified AND EXISTS (SELECT 1 FROM quarantine q WHERE q.oid = t.oid)) AS refused
    FROM unnest(p_repos, p_oids, p_sizes, p_stored, p_verified, p_tickets) WITH ORDINALITY AS t(repo, oid, size, stored_size, verified, ticket, n)
  ), ok AS (
    SELECT * FROM input WHERE NOT refused
  ), new_objects AS (
    INSERT INTO objects (oid, size, stored_size, created_at)
    SELECT DISTINCT ON (k.oid) k.oid, k.size, k.stored_size, p_at FROM ok k ORDER BY k.oid
    ON CONFLICT (oid) DO NOTHING
  ), new_refs AS (
    INSERT INTO repo_objects (repo, oid, created_at)
    SELECT DISTINCT ON (k.oid, k.repo) k.repo, k.oid, p_at FROM ok k ORDER BY k.oid, k.repo
    ON CONFLICT (repo, oid) DO NOTHING
  ), healed AS (
    -- Good bytes of a quarantined object just arrived (verified): its mark goes and its row takes
    -- the new copy's sizes. CTEs share one snapshot, so the refresh only touches rows that existed.
    DELETE FROM quarantine q WHERE q.oid IN (SELECT k.oid FROM ok k) RETURNING q.oid
  ), refreshed AS (
    UPDATE objects o SET size = k.size, stored_size = k.stored_size
    FROM ok k WHERE o.oid = k.oid AND o.oid IN (SELECT h.oid FROM healed h)
  ), ended AS (
    DELETE FROM uploads_in_flight f WHERE f.ticket IN (SELECT k.ticket FROM ok k WHERE k.ticket IS NOT NULL)
  )
  SELECT i.n, CASE WHEN i.refused THEN 'quarantined' ELSE 'ok' END FROM input i;
END $$;

-- A leftover deletion intent: 'stored' when the oid was recorded again since (the intent goes, the
-- bytes stay), 'in_flight' while a live node writes it, else 'delete'.
CREATE FUNCTION stowage_settle_intent(p_oid TEXT, p_live_since BIGINT)
RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(p_oid, 0));
  IF EXISTS (SELECT 1 FROM objects o WHERE o.oid = p_oid) THEN
    DELETE FROM pending_deletes d WHERE d.oid = p_oid;
    RETURN 'stored';
  END IF;
  IF EXISTS (SELECT 1 FROM uploads_in_flight u JOIN nodes n ON n.node = u.node WHERE u.oid = p_oid AND n.seen_at >= p_live_since) THEN
    RETURN 'in_flight';
  END IF;
  RETURN 'delete';
END $$;
`;

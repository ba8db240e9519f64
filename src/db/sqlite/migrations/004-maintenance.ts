/**
 * Maintenance (docs/maintenance.md): the jobs table (progress and final report survive a restart;
 * a job found `running` at start was interrupted), quarantine marks (a corrupt object is reported
 * missing by batch and never served until good bytes arrive), and retain's deletion intents (an
 * object's row is removed before its file, so a crash in between leaves an intent the next job
 * finishes).
 */
export const sql = `
CREATE TABLE jobs (
  id            TEXT    NOT NULL PRIMARY KEY,  -- random, base64url
  kind          TEXT    NOT NULL,              -- retain | dedupe | compress | audit
  repo          TEXT    NOT NULL,              -- "org/repo"
  state         TEXT    NOT NULL,              -- running | done | failed | interrupted
  dry_run       INTEGER NOT NULL,
  objects_done  INTEGER NOT NULL,
  objects_total INTEGER,                       -- null until counted
  bytes_done    INTEGER NOT NULL,
  bytes_total   INTEGER,
  report        TEXT,                          -- JSON, once done
  error         TEXT,
  started_at    INTEGER NOT NULL,              -- ms since epoch
  finished_at   INTEGER
) WITHOUT ROWID;

CREATE INDEX jobs_by_started ON jobs(started_at);

CREATE TABLE quarantine (
  oid    TEXT    NOT NULL PRIMARY KEY,
  repo   TEXT    NOT NULL,                     -- the repository whose audit found it
  reason TEXT    NOT NULL,
  at     INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE pending_deletes (
  oid TEXT    NOT NULL PRIMARY KEY,
  at  INTEGER NOT NULL
) WITHOUT ROWID;
`;

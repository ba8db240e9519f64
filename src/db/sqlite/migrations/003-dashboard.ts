/**
 * Dashboard state: sign-in sessions, the saved access settings, a small time series of
 * server-wide figures for the plots, and the last audit of each repository (filled by the audit job).
 */
export const sql = `
CREATE TABLE sessions (
  id_hash    TEXT    NOT NULL PRIMARY KEY,  -- sha256 of the cookie value; the raw id is never stored
  user_id    TEXT    NOT NULL,
  user_name  TEXT    NOT NULL,
  via        TEXT    NOT NULL,              -- 'site_admin' | 'admin_repo'
  created_at INTEGER NOT NULL,              -- ms since epoch
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX sessions_by_expiry ON sessions(expires_at);

CREATE TABLE settings (
  key        TEXT    NOT NULL PRIMARY KEY,  -- 'access'
  value      TEXT    NOT NULL,              -- JSON
  updated_at INTEGER NOT NULL,
  updated_by TEXT    NOT NULL
) WITHOUT ROWID;

-- One row per sample (every minute while something changes, at least hourly otherwise).
-- Totals are absolute; transfer and rejection figures are deltas since the previous sample.
CREATE TABLE stats_samples (
  at             INTEGER NOT NULL PRIMARY KEY, -- ms since epoch
  repositories   INTEGER NOT NULL,
  objects        INTEGER NOT NULL,
  logical_bytes  INTEGER NOT NULL,             -- every repository's objects, each reference counted
  stored_bytes   INTEGER NOT NULL,             -- on disk, each oid once
  uploads        INTEGER NOT NULL,
  upload_bytes   INTEGER NOT NULL,
  downloads      INTEGER NOT NULL,
  download_bytes INTEGER NOT NULL,
  rejections     TEXT    NOT NULL              -- JSON {cause: count}
);

CREATE TABLE repo_audits (
  repo          TEXT    NOT NULL PRIMARY KEY,  -- "org/repo"
  finished_at   INTEGER NOT NULL,
  objects       INTEGER NOT NULL,              -- objects read back
  bytes         INTEGER NOT NULL,
  corrupt       INTEGER NOT NULL,              -- read but did not match their digest
  unreadable    INTEGER NOT NULL,
  complete      INTEGER NOT NULL               -- 1 when the whole repository was covered
) WITHOUT ROWID;
`;

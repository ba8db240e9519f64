/**
 * What the PostgreSQL index needs to run several nodes, kept in the SQLite schema too so both pass
 * one conformance suite: the node running each job, node heartbeats, one job lease per repository,
 * and uploads in flight (retain never deletes an oid being written; see index-types.ts).
 */
export const sql = `
ALTER TABLE jobs ADD COLUMN node TEXT NOT NULL DEFAULT '';
ALTER TABLE pending_deletes ADD COLUMN node TEXT NOT NULL DEFAULT '';  -- the node deleting

CREATE TABLE nodes (
  node    TEXT    NOT NULL PRIMARY KEY,  -- random per process start
  seen_at INTEGER NOT NULL               -- ms since epoch, the last heartbeat
) WITHOUT ROWID;

CREATE TABLE job_leases (
  repo TEXT    NOT NULL PRIMARY KEY,     -- "org/repo": its jobs run one at a time, cluster-wide
  node TEXT    NOT NULL,
  at   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE uploads_in_flight (
  ticket INTEGER PRIMARY KEY AUTOINCREMENT,
  oid    TEXT    NOT NULL,
  node   TEXT    NOT NULL,
  at     INTEGER NOT NULL
);

CREATE INDEX uploads_in_flight_by_oid ON uploads_in_flight(oid);
`;

/**
 * Retain sweeps (see NodeIndex in index-types.ts), as PostgreSQL's migration 002 adds them: one node
 * on SQLite never needs them (its uploads and deletes meet in one process), but both indexes keep
 * one schema and pass one conformance suite.
 */
export const sql = `
ALTER TABLE nodes ADD COLUMN acked_sweep INTEGER NOT NULL DEFAULT 0;

CREATE TABLE sweeps (
  sweep     INTEGER PRIMARY KEY AUTOINCREMENT,
  node      TEXT    NOT NULL,              -- the node whose retain opened it
  opened_at INTEGER NOT NULL,
  deleting  INTEGER NOT NULL DEFAULT 0,    -- every live node acknowledged: deletes may run
  closed_at INTEGER
);
`;

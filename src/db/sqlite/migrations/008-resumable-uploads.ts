/**
 * Partial resumable uploads shared through the index (ResumableIndex in index-types.ts): one node on
 * SQLite keeps them here too when its objects are in a bucket, and both indexes keep one schema.
 */
export const sql = `
CREATE TABLE resumable_uploads (
  repo       TEXT    NOT NULL,
  oid        TEXT    NOT NULL,
  size       INTEGER NOT NULL,             -- announced by the batch
  part_size  INTEGER NOT NULL,
  received   INTEGER NOT NULL DEFAULT 0,   -- durable bytes: whole parts in the bucket
  states     BLOB    NOT NULL DEFAULT x'', -- the sha256 state after each whole part, 40 bytes each
  holder     TEXT,                         -- the node appending now
  touched_at INTEGER NOT NULL,
  PRIMARY KEY (repo, oid)
) WITHOUT ROWID;
`;

/** Partial resumable uploads shared by the nodes (ResumableIndex in index-types.ts). */
export const sql = `
CREATE TABLE resumable_uploads (
  repo       TEXT   NOT NULL,
  oid        TEXT   NOT NULL,
  size       BIGINT NOT NULL,              -- announced by the batch
  part_size  BIGINT NOT NULL,
  received   BIGINT NOT NULL DEFAULT 0,    -- durable bytes: whole parts in the bucket
  states     BYTEA  NOT NULL DEFAULT '\\x', -- the sha256 state after each whole part, 40 bytes each
  holder     TEXT,                         -- the node appending now
  touched_at BIGINT NOT NULL,
  PRIMARY KEY (repo, oid)
);
`;

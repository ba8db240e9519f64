/**
 * When each data key row was written (ms since the epoch), so the data key sweep
 * (service/maintenance/data-key-sweep.ts) never takes the row of a copy still being written. Rows
 * already there get the migration's time. The table is rebuilt because only a new table's column
 * may default to the current time: a row inserted without one is young, never old.
 */
export const sql = `
CREATE TABLE data_keys_aged (
  data_key_id TEXT    NOT NULL PRIMARY KEY,
  kek_id      TEXT    NOT NULL,
  wrapped     TEXT    NOT NULL,
  created_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
) WITHOUT ROWID;

INSERT INTO data_keys_aged (data_key_id, kek_id, wrapped) SELECT data_key_id, kek_id, wrapped FROM data_keys;
DROP TABLE data_keys;
ALTER TABLE data_keys_aged RENAME TO data_keys;
CREATE INDEX data_keys_by_kek ON data_keys(kek_id, data_key_id);
`;

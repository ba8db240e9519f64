/**
 * When each data key row was written (ms since the epoch), as SQLite's 010-data-key-ages adds it.
 * now() is evaluated once: rows already there get the migration's time. The default stays, so a row
 * a node of the previous version inserts (a rolling upgrade) is young, never old.
 */
export const sql = `
ALTER TABLE data_keys ADD COLUMN created_at BIGINT NOT NULL DEFAULT (extract(epoch FROM now()) * 1000)::bigint;
`;

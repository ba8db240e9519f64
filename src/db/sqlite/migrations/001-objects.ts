/** Objects (one row per stored oid) and the per-repository references that prove possession. */
export const sql = `
CREATE TABLE objects (
  oid         TEXT    NOT NULL PRIMARY KEY,
  size        INTEGER NOT NULL,  -- logical bytes
  stored_size INTEGER NOT NULL,  -- bytes on disk
  created_at  INTEGER NOT NULL   -- ms since epoch
) WITHOUT ROWID;

CREATE TABLE repo_objects (
  repo       TEXT    NOT NULL,   -- "org/repo"
  oid        TEXT    NOT NULL REFERENCES objects(oid),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (repo, oid)
) WITHOUT ROWID;

CREATE INDEX repo_objects_by_oid ON repo_objects(oid);
`;

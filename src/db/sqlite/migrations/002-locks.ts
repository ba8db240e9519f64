/**
 * File locks (https://github.com/git-lfs/git-lfs/blob/main/docs/api/locking.md). One row per held lock; releasing deletes it.
 * `seq` is AUTOINCREMENT so a value is never reused: list/verify cursors are "after seq N" and stay
 * exact when locks are deleted between pages. The unique (repo, path) index is what makes exactly
 * one of two racing creators win, even across processes sharing the file.
 */
export const sql = `
CREATE TABLE locks (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  id         TEXT    NOT NULL UNIQUE,  -- base64url, random; scoped by repo in every query
  repo       TEXT    NOT NULL,         -- "org/repo"
  path       TEXT    NOT NULL,         -- normalised, case-sensitive (BINARY collation)
  ref        TEXT,                     -- ref.name given at creation, informational
  owner_id   TEXT    NOT NULL,         -- forge user id
  owner_name TEXT    NOT NULL,         -- forge login, shown as owner.name
  locked_at  INTEGER NOT NULL          -- ms since epoch
);

CREATE UNIQUE INDEX locks_by_repo_path ON locks(repo, path);
CREATE INDEX locks_by_repo_seq ON locks(repo, seq);
`;

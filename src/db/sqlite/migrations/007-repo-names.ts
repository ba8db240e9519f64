/**
 * One key per repository whatever its spelling (repoKey): forges compare names case-insensitively
 * and a clone URL may end in `.git`. Rows move to the canonical key: references unioned (earliest
 * date kept), of two locks on one path the older stays (the other reported first), the latest audit
 * and the oldest lease stay. PostgreSQL's 003-repo-names does the same.
 */

/** repoKey in SQL: ASCII lower case (names are ASCII), less one trailing `.git`. */
const canon = (col: string): string => `(CASE WHEN lower(${col}) LIKE '%.git' THEN substr(lower(${col}), 1, length(${col}) - 4) ELSE lower(${col}) END)`;

/** Each lock's rank among those its path holds under one canonical key: 1 is the oldest, which stays. */
const rankedLocks = `SELECT seq, id, ${canon('repo')} AS repo, path, owner_name, locked_at,
  ROW_NUMBER() OVER (PARTITION BY ${canon('repo')}, path ORDER BY locked_at, seq) AS n FROM locks`;

/** The locks the step drops, each with the lock that stays in its place (logged before the step runs). */
export const report = {
  msg: 'index migration dropped a lock',
  sql: `WITH c AS (${rankedLocks})
SELECT l.id, l.repo, l.path, l.owner_name AS owner, l.locked_at, k.id AS kept
FROM c l JOIN c k ON k.repo = l.repo AND k.path = l.path AND k.n = 1 WHERE l.n > 1 ORDER BY l.seq`,
};

export const sql = `
INSERT INTO repo_objects (repo, oid, created_at)
  SELECT ${canon('repo')}, oid, min(created_at) FROM repo_objects WHERE repo <> ${canon('repo')} GROUP BY ${canon('repo')}, oid
  ON CONFLICT (repo, oid) DO UPDATE SET created_at = min(created_at, excluded.created_at);
DELETE FROM repo_objects WHERE repo <> ${canon('repo')};

DELETE FROM locks WHERE seq IN (SELECT seq FROM (${rankedLocks}) AS ranked WHERE n > 1);
UPDATE locks SET repo = ${canon('repo')} WHERE repo <> ${canon('repo')};

DELETE FROM repo_audits WHERE repo IN (SELECT repo FROM (
  SELECT repo, ROW_NUMBER() OVER (PARTITION BY ${canon('repo')} ORDER BY finished_at DESC, repo) AS n FROM repo_audits
) AS ranked WHERE n > 1);
UPDATE repo_audits SET repo = ${canon('repo')} WHERE repo <> ${canon('repo')};

DELETE FROM job_leases WHERE repo IN (SELECT repo FROM (
  SELECT repo, ROW_NUMBER() OVER (PARTITION BY ${canon('repo')} ORDER BY at, repo) AS n FROM job_leases
) AS ranked WHERE n > 1);
UPDATE job_leases SET repo = ${canon('repo')} WHERE repo <> ${canon('repo')};

UPDATE jobs SET repo = ${canon('repo')} WHERE repo <> ${canon('repo')};
UPDATE quarantine SET repo = ${canon('repo')} WHERE repo <> ${canon('repo')};
`;

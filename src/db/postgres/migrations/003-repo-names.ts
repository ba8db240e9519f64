/**
 * One key per repository whatever its spelling, as SQLite's 007-repo-names does (see there for
 * what is kept of rows that meet under one key). One transaction with the rest of the migration,
 * under the migration lock: every node of a cluster sees the index before or after, never between.
 */

/** repoKey in SQL: ASCII lower case (names are ASCII), less one trailing `.git`. */
const canon = (col: string): string => `(CASE WHEN lower(${col}) LIKE '%.git' THEN substr(lower(${col}), 1, length(${col}) - 4) ELSE lower(${col}) END)`;

/** Each lock's rank among those its path holds under one canonical key: 1 is the oldest, which stays. */
const rankedLocks = `SELECT seq, id, ${canon('repo')} AS repo, path, owner_name, locked_at,
  ROW_NUMBER() OVER (PARTITION BY ${canon('repo')}, path ORDER BY locked_at, seq) AS n FROM locks`;

/** The locks the step drops, each with the lock that stays in its place (logged once migrated). */
export const report = {
  msg: 'index migration dropped a lock',
  sql: `WITH c AS (${rankedLocks})
SELECT l.id, l.repo, l.path, l.owner_name AS owner, l.locked_at, k.id AS kept
FROM c l JOIN c k ON k.repo = l.repo AND k.path = l.path AND k.n = 1 WHERE l.n > 1 ORDER BY l.seq`,
};

export const sql = `
INSERT INTO repo_objects AS r (repo, oid, created_at)
  SELECT ${canon('repo')}, oid, min(created_at) FROM repo_objects WHERE repo <> ${canon('repo')} GROUP BY 1, 2
  ON CONFLICT (repo, oid) DO UPDATE SET created_at = LEAST(r.created_at, EXCLUDED.created_at);
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

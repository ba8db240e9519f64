import type { JobIndex, JobProgress, JobRow } from '../index-types.js';
import { KEEP_JOBS, toJob, type RawJob } from '../index-rows.js';
import type { Sql } from './pg-client.js';

/**
 * The jobs table and the per-repository job lease on PostgreSQL. Liveness is the nodes table: a
 * node whose heartbeat is before `liveSince`, or that has no heartbeat row at all, is dead.
 */
export class PgJobs implements JobIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async insert(id: string, kind: string, repo: string, dryRun: boolean, startedAt: number, node: string): Promise<void> {
    await this.#sql`INSERT INTO jobs (id, kind, repo, state, dry_run, objects_done, bytes_done, started_at, node)
      VALUES (${id}, ${kind}, ${repo}, 'running', ${dryRun ? 1 : 0}::int, 0, 0, ${startedAt}::int8, ${node})`;
    await this.#sql`DELETE FROM jobs WHERE state <> 'running' AND id NOT IN (SELECT id FROM jobs ORDER BY started_at DESC LIMIT ${KEEP_JOBS}::int8)`;
  }

  async progress(id: string, p: JobProgress): Promise<void> {
    await this.#sql`UPDATE jobs SET objects_done = ${p.objectsDone}::int8, objects_total = ${p.objectsTotal}::int8,
      bytes_done = ${p.bytesDone}::int8, bytes_total = ${p.bytesTotal}::int8 WHERE id = ${id}`;
  }

  async finish(id: string, state: 'done' | 'failed' | 'cancelled' | 'interrupted', report: unknown, error: string | null, p: JobProgress): Promise<void> {
    await this.#sql`UPDATE jobs SET state = ${state}, report = ${report === null ? null : JSON.stringify(report)}::text, error = ${error}::text,
      finished_at = ${Date.now()}::int8, objects_done = ${p.objectsDone}::int8, objects_total = ${p.objectsTotal}::int8,
      bytes_done = ${p.bytesDone}::int8, bytes_total = ${p.bytesTotal}::int8 WHERE id = ${id}`;
  }

  async get(id: string): Promise<JobRow | null> {
    const rows = await this.#sql<RawJob[]>`SELECT * FROM jobs WHERE id = ${id}`;
    return rows[0] === undefined ? null : toJob(rows[0]);
  }

  async recent(limit: number): Promise<JobRow[]> {
    return (await this.#sql<RawJob[]>`SELECT * FROM jobs ORDER BY started_at DESC LIMIT ${limit}::int8`).map(toJob);
  }

  async recentOf(repo: string, limit: number): Promise<JobRow[]> {
    return (await this.#sql<RawJob[]>`SELECT * FROM jobs WHERE repo = ${repo} ORDER BY started_at DESC LIMIT ${limit}::int8`).map(toJob);
  }

  async markInterrupted(liveSince: number | null): Promise<number> {
    const now = Date.now();
    const r =
      liveSince === null
        ? await this.#sql`UPDATE jobs SET state = 'interrupted', finished_at = ${now}::int8 WHERE state = 'running'`
        : await this.#sql`UPDATE jobs j SET state = 'interrupted', finished_at = ${now}::int8 WHERE j.state = 'running'
            AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node = j.node AND n.seen_at >= ${liveSince}::int8)`;
    return r.count;
  }

  async acquireLease(repo: string, node: string, liveSince: number): Promise<boolean> {
    // ON CONFLICT … DO UPDATE locks the lease row and re-checks WHERE on its latest version: of
    // nodes racing for a dead node's lease, exactly one takes it.
    const rows = await this.#sql`
      INSERT INTO job_leases AS l (repo, node, at) VALUES (${repo}, ${node}, ${Date.now()}::int8)
      ON CONFLICT (repo) DO UPDATE SET node = excluded.node, at = excluded.at
      WHERE l.node = excluded.node OR NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node = l.node AND n.seen_at >= ${liveSince}::int8)
      RETURNING l.node`;
    return rows.length === 1;
  }

  async releaseLease(repo: string, node: string): Promise<void> {
    await this.#sql`DELETE FROM job_leases WHERE repo = ${repo} AND node = ${node}`;
  }
}

import {
  type AuditRow,
  type HistogramBucket,
  type LargestObject,
  type LockListRow,
  type RepoListRow,
  type RepoSummary,
  type ServerTotals,
  type StatsIndex,
  type StatsSample,
} from '../index-types.js';
import { fullHistogram, SIZE_BUCKET_SQL, toSample, type RawSample } from '../index-rows.js';
import type { Sql } from './pg-client.js';

/** Figures over objects, references, locks and audits, and the stats time series, on PostgreSQL. */
export class PgStats implements StatsIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async repoSummary(repo: string): Promise<RepoSummary> {
    const r = (await this.#sql<{ objects: number; logical: number; stored: number }[]>`
      SELECT count(*) AS objects, coalesce(sum(o.size), 0) AS logical, coalesce(sum(o.stored_size), 0) AS stored
      FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ${repo}`)[0]!;
    return { objects: r.objects, logicalBytes: r.logical, storedBytes: r.stored };
  }

  async largestObjects(repo: string, limit: number): Promise<LargestObject[]> {
    const rows = await this.#sql<{ oid: string; size: number; stored_size: number; created_at: number }[]>`
      SELECT o.oid, o.size, o.stored_size, r.created_at FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ${repo}
      ORDER BY o.size DESC, o.oid LIMIT ${limit}::int8`;
    return rows.map((r) => ({ oid: r.oid, size: r.size, storedSize: r.stored_size, createdAt: r.created_at }));
  }

  async sizeHistogram(repo: string): Promise<HistogramBucket[]> {
    const rows = await this.#sql<{ bucket: number; count: number; bytes: number }[]>`
      SELECT ${this.#sql.unsafe(SIZE_BUCKET_SQL)} AS bucket, count(*) AS count, sum(o.size) AS bytes
      FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ${repo} GROUP BY 1`;
    return fullHistogram(rows);
  }

  async locks(repo: string, limit: number): Promise<{ total: number; items: LockListRow[] }> {
    const rows = await this.#sql<{ id: string; path: string; owner_name: string; locked_at: number; total: number }[]>`
      SELECT id, path, owner_name, locked_at, count(*) OVER () AS total FROM locks WHERE repo = ${repo} ORDER BY locked_at, id LIMIT ${limit}::int8`;
    const items = rows.map((r) => ({ id: r.id, path: r.path, ownerName: r.owner_name, lockedAt: r.locked_at }));
    // The window counts before LIMIT; with no row in the page (limit 0, or none held) count apart.
    const total = rows[0]?.total ?? (await this.#sql<{ n: number }[]>`SELECT count(*) AS n FROM locks WHERE repo = ${repo}`)[0]!.n;
    return { total, items };
  }

  async lockTotal(): Promise<number> {
    return (await this.#sql<{ n: number }[]>`SELECT count(*) AS n FROM locks`)[0]!.n;
  }

  async lastAudit(repo: string): Promise<AuditRow | null> {
    const rows = await this.#sql<{ finished_at: number; objects: number; bytes: number; corrupt: number; unreadable: number; complete: number }[]>`
      SELECT finished_at, objects, bytes, corrupt, unreadable, complete FROM repo_audits WHERE repo = ${repo}`;
    const r = rows[0];
    if (r === undefined) return null;
    return { finishedAt: r.finished_at, objects: r.objects, bytes: r.bytes, corrupt: r.corrupt, unreadable: r.unreadable, complete: r.complete === 1 };
  }

  async recordAudit(repo: string, a: AuditRow): Promise<void> {
    await this.#sql`INSERT INTO repo_audits (repo, finished_at, objects, bytes, corrupt, unreadable, complete)
      VALUES (${repo}, ${a.finishedAt}::int8, ${a.objects}::int8, ${a.bytes}::int8, ${a.corrupt}::int8, ${a.unreadable}::int8, ${a.complete ? 1 : 0}::int)
      ON CONFLICT (repo) DO UPDATE SET finished_at = excluded.finished_at, objects = excluded.objects, bytes = excluded.bytes,
        corrupt = excluded.corrupt, unreadable = excluded.unreadable, complete = excluded.complete`;
  }

  async auditTotals(): Promise<{ clean: number; problemsFound: number; incomplete: number; lastSuccessAt: number | null }> {
    const r = (await this.#sql<{ clean: number; problems: number; incomplete: number; last_clean: number | null }[]>`
      SELECT count(*) FILTER (WHERE corrupt + unreadable = 0 AND complete = 1) AS clean,
        count(*) FILTER (WHERE corrupt + unreadable > 0) AS problems,
        count(*) FILTER (WHERE corrupt + unreadable = 0 AND complete = 0) AS incomplete,
        max(finished_at) FILTER (WHERE corrupt + unreadable = 0 AND complete = 1) AS last_clean FROM repo_audits`)[0]!;
    return { clean: r.clean, problemsFound: r.problems, incomplete: r.incomplete, lastSuccessAt: r.last_clean };
  }

  async quarantinedTotal(): Promise<number> {
    return (await this.#sql<{ n: number }[]>`SELECT count(*) AS n FROM quarantine`)[0]!.n;
  }

  async repositoryList(limit: number): Promise<RepoListRow[]> {
    const rows = await this.#sql<{ repo: string; objects: number; logical: number; finished_at: number | null; ok: boolean | null }[]>`
      SELECT l.repo, l.objects, l.logical, a.finished_at, (a.complete = 1 AND a.corrupt = 0 AND a.unreadable = 0) AS ok
      FROM (SELECT r.repo, count(*) AS objects, sum(o.size) AS logical FROM repo_objects r JOIN objects o ON o.oid = r.oid
            GROUP BY r.repo ORDER BY r.repo LIMIT ${limit}::int8) l
      LEFT JOIN repo_audits a ON a.repo = l.repo ORDER BY l.repo`;
    return rows.map((r) => ({
      repo: r.repo,
      objects: r.objects,
      logicalBytes: r.logical,
      audit: r.finished_at === null ? null : { finishedAt: r.finished_at, ok: r.ok === true },
    }));
  }

  async serverTotals(): Promise<ServerTotals> {
    const r = (await this.#sql<{ repos: number; refs: number; logical: number; n: number; unique_bytes: number; stored: number }[]>`
      SELECT (SELECT count(DISTINCT repo) FROM repo_objects) AS repos, refs.n AS refs, refs.logical, s.n, s.unique_bytes, s.stored
      FROM (SELECT count(*) AS n, coalesce(sum(o.size), 0) AS logical FROM repo_objects r JOIN objects o ON o.oid = r.oid) refs,
           (SELECT count(*) AS n, coalesce(sum(size), 0) AS unique_bytes, coalesce(sum(stored_size), 0) AS stored FROM objects) s`)[0]!;
    return { repositories: r.repos, objects: r.n, references: r.refs, logicalBytes: r.logical, uniqueBytes: r.unique_bytes, storedBytes: r.stored };
  }

  async insertSample(s: StatsSample): Promise<void> {
    // Samples of several nodes at one instant: totals are the same figures read by each (replace),
    // transfers and rejections are each node's own since its last sample (add up, per cause).
    await this.#sql`
      INSERT INTO stats_samples AS t (at, repositories, objects, logical_bytes, stored_bytes, uploads, upload_bytes, downloads, download_bytes, rejections)
      VALUES (${s.at}::int8, ${s.repositories}::int8, ${s.objects}::int8, ${s.logicalBytes}::int8, ${s.storedBytes}::int8, ${s.uploads}::int8,
        ${s.uploadBytes}::int8, ${s.downloads}::int8, ${s.downloadBytes}::int8, ${JSON.stringify(s.rejections)})
      ON CONFLICT (at) DO UPDATE SET repositories = excluded.repositories, objects = excluded.objects,
        logical_bytes = excluded.logical_bytes, stored_bytes = excluded.stored_bytes,
        uploads = t.uploads + excluded.uploads, upload_bytes = t.upload_bytes + excluded.upload_bytes,
        downloads = t.downloads + excluded.downloads, download_bytes = t.download_bytes + excluded.download_bytes,
        rejections = coalesce((
          SELECT jsonb_object_agg(e.key, e.n)::text FROM (
            SELECT key, sum(value::numeric) AS n FROM (
              SELECT * FROM jsonb_each_text(t.rejections::jsonb) UNION ALL SELECT * FROM jsonb_each_text(excluded.rejections::jsonb)
            ) u GROUP BY key
          ) e), '{}')`;
  }

  async samplesSince(at: number): Promise<StatsSample[]> {
    return (await this.#sql<RawSample[]>`SELECT * FROM stats_samples WHERE at > ${at}::int8 ORDER BY at`).map(toSample);
  }

  async lastSample(): Promise<StatsSample | null> {
    const rows = await this.#sql<RawSample[]>`SELECT * FROM stats_samples ORDER BY at DESC LIMIT 1`;
    return rows[0] === undefined ? null : toSample(rows[0]);
  }

  async pruneSamples(before: number): Promise<void> {
    await this.#sql`DELETE FROM stats_samples WHERE at < ${before}::int8`;
  }
}

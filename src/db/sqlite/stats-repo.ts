import type { Statement } from 'better-sqlite3';
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
import type { Db } from './database.js';

/** Read-only figures over objects, references, locks and audits, the stats time series and audit results. */
export class StatsRepo implements StatsIndex {
  readonly #summary: Statement<[string], { objects: number; logical: number | null; stored: number | null }>;
  readonly #largest: Statement<[string, number], { oid: string; size: number; stored_size: number; created_at: number }>;
  readonly #histogram: Statement<[string], { bucket: number; count: number; bytes: number }>;
  readonly #locks: Statement<[string, number], { id: string; path: string; owner_name: string; locked_at: number }>;
  readonly #lockCount: Statement<[string], { n: number }>;
  readonly #allLocks: Statement<[], { n: number }>;
  readonly #audit: Statement<[string], { finished_at: number; objects: number; bytes: number; corrupt: number; unreadable: number; complete: number }>;
  readonly #putAudit: Statement<[string, number, number, number, number, number, number]>;
  readonly #auditTotals: Statement<[], { clean: number | null; problems: number | null; incomplete: number | null; last_clean: number | null }>;
  readonly #quarantined: Statement<[], { n: number }>;
  readonly #repos: Statement<[], { n: number; refs: number; logical: number | null }>;
  readonly #store: Statement<[], { n: number; unique_bytes: number | null; stored: number | null }>;
  readonly #repoList: Statement<[number], { repo: string; objects: number; logical: number; finished_at: number | null; ok: number | null }>;
  readonly #insertSample: Statement<[number, number, number, number, number, number, number, number, number, string]>;
  readonly #samplesSince: Statement<[number], RawSample>;
  readonly #lastSample: Statement<[], RawSample>;
  readonly #pruneSamples: Statement<[number]>;
  readonly #sampleAt: Statement<[number], RawSample>;
  readonly #addSample: (s: StatsSample) => void;

  constructor(db: Db) {
    const join = 'FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ?';
    this.#summary = db.prepare(`SELECT COUNT(*) AS objects, SUM(o.size) AS logical, SUM(o.stored_size) AS stored ${join}`);
    this.#largest = db.prepare(`SELECT o.oid, o.size, o.stored_size, r.created_at ${join} ORDER BY o.size DESC, o.oid LIMIT ?`);
    this.#histogram = db.prepare(`SELECT ${SIZE_BUCKET_SQL} AS bucket, COUNT(*) AS count, SUM(o.size) AS bytes ${join} GROUP BY bucket`);
    this.#locks = db.prepare('SELECT id, path, owner_name, locked_at FROM locks WHERE repo = ? ORDER BY locked_at, id LIMIT ?');
    this.#lockCount = db.prepare('SELECT COUNT(*) AS n FROM locks WHERE repo = ?');
    this.#allLocks = db.prepare('SELECT COUNT(*) AS n FROM locks');
    this.#audit = db.prepare('SELECT finished_at, objects, bytes, corrupt, unreadable, complete FROM repo_audits WHERE repo = ?');
    this.#putAudit = db.prepare(
      'INSERT INTO repo_audits (repo, finished_at, objects, bytes, corrupt, unreadable, complete) VALUES (?, ?, ?, ?, ?, ?, ?) ' +
        'ON CONFLICT (repo) DO UPDATE SET finished_at = excluded.finished_at, objects = excluded.objects, bytes = excluded.bytes, ' +
        'corrupt = excluded.corrupt, unreadable = excluded.unreadable, complete = excluded.complete',
    );
    this.#auditTotals = db.prepare(
      'SELECT SUM(corrupt + unreadable = 0 AND complete = 1) AS clean, SUM(corrupt + unreadable > 0) AS problems, ' +
        'SUM(corrupt + unreadable = 0 AND complete = 0) AS incomplete, ' +
        'MAX(CASE WHEN corrupt + unreadable = 0 AND complete = 1 THEN finished_at END) AS last_clean FROM repo_audits',
    );
    this.#quarantined = db.prepare('SELECT COUNT(*) AS n FROM quarantine');
    this.#repos = db.prepare('SELECT COUNT(DISTINCT r.repo) AS n, COUNT(*) AS refs, SUM(o.size) AS logical FROM repo_objects r JOIN objects o ON o.oid = r.oid');
    this.#store = db.prepare('SELECT COUNT(*) AS n, SUM(size) AS unique_bytes, SUM(stored_size) AS stored FROM objects');
    this.#repoList = db.prepare(
      'SELECT l.repo, l.objects, l.logical, a.finished_at, (a.complete = 1 AND a.corrupt = 0 AND a.unreadable = 0) AS ok ' +
        'FROM (SELECT r.repo, COUNT(*) AS objects, SUM(o.size) AS logical FROM repo_objects r JOIN objects o ON o.oid = r.oid GROUP BY r.repo ORDER BY r.repo LIMIT ?) l ' +
        'LEFT JOIN repo_audits a ON a.repo = l.repo ORDER BY l.repo',
    );
    this.#insertSample = db.prepare(
      'INSERT OR REPLACE INTO stats_samples (at, repositories, objects, logical_bytes, stored_bytes, uploads, upload_bytes, downloads, download_bytes, rejections) ' +
        'VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.#samplesSince = db.prepare('SELECT * FROM stats_samples WHERE at > ? ORDER BY at');
    this.#lastSample = db.prepare('SELECT * FROM stats_samples ORDER BY at DESC LIMIT 1');
    this.#pruneSamples = db.prepare('DELETE FROM stats_samples WHERE at < ?');
    this.#sampleAt = db.prepare('SELECT * FROM stats_samples WHERE at = ?');
    this.#addSample = db.transaction((sample: StatsSample) => this.#putSample(sample));
  }

  async repoSummary(repo: string): Promise<RepoSummary> {
    const r = this.#summary.get(repo)!;
    return { objects: r.objects, logicalBytes: r.logical ?? 0, storedBytes: r.stored ?? 0 };
  }

  async largestObjects(repo: string, limit: number): Promise<LargestObject[]> {
    return this.#largest.all(repo, limit).map((r) => ({ oid: r.oid, size: r.size, storedSize: r.stored_size, createdAt: r.created_at }));
  }

  /** Every bucket, empty ones included, so plots and JSON always have the same shape. */
  async sizeHistogram(repo: string): Promise<HistogramBucket[]> {
    return fullHistogram(this.#histogram.all(repo));
  }

  async locks(repo: string, limit: number): Promise<{ total: number; items: LockListRow[] }> {
    const items = this.#locks.all(repo, limit).map((r) => ({ id: r.id, path: r.path, ownerName: r.owner_name, lockedAt: r.locked_at }));
    return { total: this.#lockCount.get(repo)!.n, items };
  }

  async lockTotal(): Promise<number> {
    return this.#allLocks.get()!.n;
  }

  async lastAudit(repo: string): Promise<AuditRow | null> {
    const r = this.#audit.get(repo);
    if (r === undefined) return null;
    return { finishedAt: r.finished_at, objects: r.objects, bytes: r.bytes, corrupt: r.corrupt, unreadable: r.unreadable, complete: r.complete === 1 };
  }

  /** For the audit job: replaces the repository's last audit result. */
  async recordAudit(repo: string, a: AuditRow): Promise<void> {
    this.#putAudit.run(repo, a.finishedAt, a.objects, a.bytes, a.corrupt, a.unreadable, a.complete ? 1 : 0);
  }

  /** Every repository's last audit, summed by outcome (metrics; never per repository). */
  async auditTotals(): Promise<{ clean: number; problemsFound: number; incomplete: number; lastSuccessAt: number | null }> {
    const r = this.#auditTotals.get()!;
    return { clean: r.clean ?? 0, problemsFound: r.problems ?? 0, incomplete: r.incomplete ?? 0, lastSuccessAt: r.last_clean };
  }

  /** Objects under quarantine server-wide. */
  async quarantinedTotal(): Promise<number> {
    return this.#quarantined.get()!.n;
  }

  /** Repositories holding objects, by name, at most `limit`. */
  async repositoryList(limit: number): Promise<RepoListRow[]> {
    return this.#repoList.all(limit).map((r) => ({
      repo: r.repo,
      objects: r.objects,
      logicalBytes: r.logical,
      audit: r.finished_at === null ? null : { finishedAt: r.finished_at, ok: r.ok === 1 },
    }));
  }

  async serverTotals(): Promise<ServerTotals> {
    const r = this.#repos.get()!;
    const s = this.#store.get()!;
    return {
      repositories: r.n,
      objects: s.n,
      references: r.refs,
      logicalBytes: r.logical ?? 0,
      uniqueBytes: s.unique_bytes ?? 0,
      storedBytes: s.stored ?? 0,
    };
  }

  async insertSample(sample: StatsSample): Promise<void> {
    this.#addSample(sample);
  }

  /** Totals replace; transfer deltas and rejections add to a sample another node wrote at the same instant. */
  #putSample(sample: StatsSample): void {
    const r = this.#sampleAt.get(sample.at);
    const s = r === undefined ? sample : addDeltas(toSample(r), sample);
    this.#insertSample.run(s.at, s.repositories, s.objects, s.logicalBytes, s.storedBytes, s.uploads, s.uploadBytes, s.downloads, s.downloadBytes, JSON.stringify(s.rejections));
  }

  async samplesSince(at: number): Promise<StatsSample[]> {
    return this.#samplesSince.all(at).map(toSample);
  }

  async lastSample(): Promise<StatsSample | null> {
    const r = this.#lastSample.get();
    return r === undefined ? null : toSample(r);
  }

  async pruneSamples(before: number): Promise<void> {
    this.#pruneSamples.run(before);
  }
}

/** `next` with `prev`'s transfer deltas and rejections added (totals are `next`'s). */
function addDeltas(prev: StatsSample, next: StatsSample): StatsSample {
  const rejections: Record<string, number> = { ...prev.rejections };
  for (const [k, v] of Object.entries(next.rejections)) rejections[k] = (rejections[k] ?? 0) + v;
  return {
    ...next,
    uploads: prev.uploads + next.uploads,
    uploadBytes: prev.uploadBytes + next.uploadBytes,
    downloads: prev.downloads + next.downloads,
    downloadBytes: prev.downloadBytes + next.downloadBytes,
    rejections,
  };
}

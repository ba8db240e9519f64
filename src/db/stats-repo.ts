import type { Statement } from 'better-sqlite3';
import type { Db } from './database.js';

/** What one repository holds, as that repository sees it (never revealing other repositories). */
export interface RepoSummary {
  readonly objects: number;
  /** Bytes as uploaded (sum of object sizes). */
  readonly logicalBytes: number;
  /** Bytes its objects occupy on disk after compression, each counted in full even when shared. */
  readonly storedBytes: number;
}

export interface LargestObject {
  readonly oid: string;
  readonly size: number;
  readonly storedSize: number;
  /** When this repository first held it (ms since epoch). */
  readonly createdAt: number;
}

export interface HistogramBucket {
  /** Inclusive lower bound in bytes. */
  readonly min: number;
  /** Exclusive upper bound in bytes; null for the last, open bucket. */
  readonly max: number | null;
  readonly count: number;
  readonly bytes: number;
}

export interface LockRow {
  readonly id: string;
  readonly path: string;
  readonly ownerName: string;
  readonly lockedAt: number;
}

/** Result of the last audit of a repository; written by the audit job (issue 6), read by the page. */
export interface AuditRow {
  readonly finishedAt: number;
  readonly objects: number;
  readonly bytes: number;
  readonly corrupt: number;
  readonly unreadable: number;
  readonly complete: boolean;
}

/** One line of the dashboard's repository list. */
export interface RepoListRow {
  readonly repo: string;
  readonly objects: number;
  readonly logicalBytes: number;
  /** The last audit: null when never audited; ok when complete with nothing corrupt or unreadable. */
  readonly audit: { readonly finishedAt: number; readonly ok: boolean } | null;
}

/** Server-wide totals (dashboard only: these do show what dedupe saves across repositories). */
export interface ServerTotals {
  readonly repositories: number;
  /** Distinct oids in the shared store. */
  readonly objects: number;
  /** Every repository's reference counted: what clients uploaded, as the repositories see it. */
  readonly references: number;
  readonly logicalBytes: number;
  /** Each oid once, before compression. */
  readonly uniqueBytes: number;
  /** Each oid once, on disk. */
  readonly storedBytes: number;
}

/** One point of the time series behind the dashboard plots; transfer figures are deltas since the previous point. */
export interface StatsSample {
  readonly at: number;
  readonly repositories: number;
  readonly objects: number;
  readonly logicalBytes: number;
  readonly storedBytes: number;
  readonly uploads: number;
  readonly uploadBytes: number;
  readonly downloads: number;
  readonly downloadBytes: number;
  readonly rejections: Readonly<Record<string, number>>;
}

/**
 * Histogram bounds: powers of four from 1 KiB to 4 GiB, so a repository of icons and one of
 * video masters both spread over several bars.
 */
export const HISTOGRAM_BOUNDS: readonly number[] = Array.from({ length: 12 }, (_, i) => 1024 * 4 ** i);

const LOCKS_SHOWN = 200;

/**
 * Read-only figures over objects, references, locks and audits, plus the stats time series and
 * the audit results. Every statement prepared once (design rule 9). The locks table belongs to the
 * locking feature: it is queried only when it exists, so this works whatever the schema version.
 */
export class StatsRepo {
  readonly #summary: Statement<[string], { objects: number; logical: number | null; stored: number | null }>;
  readonly #largest: Statement<[string, number], { oid: string; size: number; stored_size: number; created_at: number }>;
  readonly #histogram: Statement<[string], { bucket: number; count: number; bytes: number }>;
  readonly #locks: Statement<[string, number], { id: string; path: string; owner_name: string; locked_at: number }> | null;
  readonly #lockCount: Statement<[string], { n: number }> | null;
  readonly #allLocks: Statement<[], { n: number }> | null;
  readonly #audit: Statement<[string], { finished_at: number; objects: number; bytes: number; corrupt: number; unreadable: number; complete: number }>;
  readonly #putAudit: Statement<[string, number, number, number, number, number, number]>;
  readonly #auditTotals: Statement<[], { clean: number | null; problems: number | null; incomplete: number | null; last_clean: number | null }>;
  readonly #quarantined: Statement<[], { n: number }>;
  readonly #repos: Statement<[], { n: number; refs: number; logical: number | null }>;
  readonly #store: Statement<[], { n: number; unique_bytes: number | null; stored: number | null }>;
  readonly #repoList: Statement<[number], { repo: string; objects: number; logical: number; finished_at: number | null; ok: number | null }>;
  readonly #insertSample: Statement<[number, number, number, number, number, number, number, number, number, string]>;
  readonly #samplesSince: Statement<[number], Record<string, number | string>>;
  readonly #lastSample: Statement<[], Record<string, number | string>>;
  readonly #pruneSamples: Statement<[number]>;

  constructor(db: Db) {
    const join = 'FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ?';
    this.#summary = db.prepare(`SELECT COUNT(*) AS objects, SUM(o.size) AS logical, SUM(o.stored_size) AS stored ${join}`);
    this.#largest = db.prepare(`SELECT o.oid, o.size, o.stored_size, r.created_at ${join} ORDER BY o.size DESC, o.oid LIMIT ?`);
    const bucket = `CASE ${HISTOGRAM_BOUNDS.map((b, i) => `WHEN o.size < ${b} THEN ${i}`).join(' ')} ELSE ${HISTOGRAM_BOUNDS.length} END`;
    this.#histogram = db.prepare(`SELECT ${bucket} AS bucket, COUNT(*) AS count, SUM(o.size) AS bytes ${join} GROUP BY bucket`);
    const hasLocks = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'locks'").get() !== undefined;
    this.#locks = hasLocks ? db.prepare('SELECT id, path, owner_name, locked_at FROM locks WHERE repo = ? ORDER BY locked_at, id LIMIT ?') : null;
    this.#lockCount = hasLocks ? db.prepare('SELECT COUNT(*) AS n FROM locks WHERE repo = ?') : null;
    this.#allLocks = hasLocks ? db.prepare('SELECT COUNT(*) AS n FROM locks') : null;
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
  }

  repoSummary(repo: string): RepoSummary {
    const r = this.#summary.get(repo)!;
    return { objects: r.objects, logicalBytes: r.logical ?? 0, storedBytes: r.stored ?? 0 };
  }

  largestObjects(repo: string, limit: number): LargestObject[] {
    return this.#largest.all(repo, limit).map((r) => ({ oid: r.oid, size: r.size, storedSize: r.stored_size, createdAt: r.created_at }));
  }

  /** Every bucket, empty ones included, so plots and JSON always have the same shape. */
  sizeHistogram(repo: string): HistogramBucket[] {
    const rows = new Map(this.#histogram.all(repo).map((r) => [r.bucket, r]));
    return Array.from({ length: HISTOGRAM_BOUNDS.length + 1 }, (_, i) => ({
      min: i === 0 ? 0 : HISTOGRAM_BOUNDS[i - 1]!,
      max: i < HISTOGRAM_BOUNDS.length ? HISTOGRAM_BOUNDS[i]! : null,
      count: rows.get(i)?.count ?? 0,
      bytes: rows.get(i)?.bytes ?? 0,
    }));
  }

  /** Current locks of a repository (oldest first, at most 200) and their total; null when locking is not installed. */
  locks(repo: string): { total: number; items: LockRow[] } | null {
    if (this.#locks === null || this.#lockCount === null) return null;
    const items = this.#locks.all(repo, LOCKS_SHOWN).map((r) => ({ id: r.id, path: r.path, ownerName: r.owner_name, lockedAt: r.locked_at }));
    return { total: this.#lockCount.get(repo)!.n, items };
  }

  /** Locks held server-wide; null when locking is not installed. */
  lockTotal(): number | null {
    return this.#allLocks === null ? null : this.#allLocks.get()!.n;
  }

  lastAudit(repo: string): AuditRow | null {
    const r = this.#audit.get(repo);
    if (r === undefined) return null;
    return { finishedAt: r.finished_at, objects: r.objects, bytes: r.bytes, corrupt: r.corrupt, unreadable: r.unreadable, complete: r.complete === 1 };
  }

  /** For the audit job: replaces the repository's last audit result. */
  recordAudit(repo: string, a: AuditRow): void {
    this.#putAudit.run(repo, a.finishedAt, a.objects, a.bytes, a.corrupt, a.unreadable, a.complete ? 1 : 0);
  }

  /** Every repository's last audit, summed by outcome (metrics; never per repository). */
  auditTotals(): { clean: number; problemsFound: number; incomplete: number; lastSuccessAt: number | null } {
    const r = this.#auditTotals.get()!;
    return { clean: r.clean ?? 0, problemsFound: r.problems ?? 0, incomplete: r.incomplete ?? 0, lastSuccessAt: r.last_clean };
  }

  /** Objects under quarantine server-wide. */
  quarantinedTotal(): number {
    return this.#quarantined.get()!.n;
  }

  /** Repositories holding objects, by name, at most `limit`. */
  repositoryList(limit: number): RepoListRow[] {
    return this.#repoList.all(limit).map((r) => ({
      repo: r.repo,
      objects: r.objects,
      logicalBytes: r.logical,
      audit: r.finished_at === null ? null : { finishedAt: r.finished_at, ok: r.ok === 1 },
    }));
  }

  serverTotals(): ServerTotals {
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

  insertSample(s: StatsSample): void {
    this.#insertSample.run(s.at, s.repositories, s.objects, s.logicalBytes, s.storedBytes, s.uploads, s.uploadBytes, s.downloads, s.downloadBytes, JSON.stringify(s.rejections));
  }

  samplesSince(at: number): StatsSample[] {
    return this.#samplesSince.all(at).map(toSample);
  }

  lastSample(): StatsSample | null {
    const r = this.#lastSample.get();
    return r === undefined ? null : toSample(r);
  }

  pruneSamples(before: number): void {
    this.#pruneSamples.run(before);
  }
}

function toSample(r: Record<string, number | string>): StatsSample {
  return {
    at: r.at as number,
    repositories: r.repositories as number,
    objects: r.objects as number,
    logicalBytes: r.logical_bytes as number,
    storedBytes: r.stored_bytes as number,
    uploads: r.uploads as number,
    uploadBytes: r.upload_bytes as number,
    downloads: r.downloads as number,
    downloadBytes: r.download_bytes as number,
    rejections: JSON.parse(r.rejections as string) as Record<string, number>,
  };
}

import type { HistogramBucket, ServerTotals, StatsIndex, StatsSample } from '../db/index-types.js';
import type { Metrics } from '../metrics/registry.js';
import type { RepoName } from '../protocol/repo-name.js';

/** GET /{org}/{repo}/objects/stats, and what the repository page renders from it. */
export interface RepoStats {
  readonly repository: string;
  readonly generated_at: string;
  readonly objects: number;
  readonly logical_bytes: number;
  /** Bytes after compression, each object in full even when shared: whether another repository holds an oid is never revealed. */
  readonly stored_bytes: number;
  /** logical − stored. */
  readonly saved_bytes: number;
  /** saved / logical, 0..1 (0 for an empty repository). */
  readonly saving_ratio: number;
  readonly largest_objects: readonly { oid: string; size: number; stored_size: number; created_at: string }[];
  /** Object sizes in powers-of-four buckets; `max` is exclusive, null for the last bucket. */
  readonly size_histogram: readonly HistogramBucket[];
  readonly locks: {
    /** False when locking is not installed on this server (no locks table). */
    readonly available: boolean;
    readonly total: number;
    /** A lock older than this is stale (SVC_LOCK_MAX_AGE); null when locks never go stale. */
    readonly max_age_seconds: number | null;
    readonly items: readonly { id: string; path: string; owner: string; locked_at: string; age_seconds: number; stale: boolean }[];
  };
  /** Null until an audit ran ("never audited"); filled by the audit job through StatsIndex.recordAudit. */
  readonly last_audit: {
    readonly finished_at: string;
    readonly objects: number;
    readonly bytes: number;
    readonly corrupt: number;
    readonly unreadable: number;
    readonly complete: boolean;
    /** True when the whole repository was read and nothing was corrupt or unreadable. */
    readonly ok: boolean;
  } | null;
}

export interface RepoListItem {
  readonly repository: string;
  readonly objects: number;
  readonly logical_bytes: number;
  /** 'clean', 'problems' or null when never audited. */
  readonly last_audit: 'clean' | 'problems' | null;
}

export interface TransferFigures {
  readonly uploads: number;
  readonly upload_bytes: number;
  readonly downloads: number;
  readonly download_bytes: number;
}

export interface SeriesPoint extends TransferFigures {
  readonly at: string;
  readonly repositories: number;
  readonly objects: number;
  readonly logical_bytes: number;
  readonly stored_bytes: number;
}

export interface JobView {
  readonly id: string;
  readonly kind: string;
  readonly repository: string;
  /** queued | running | done | failed | cancelled | interrupted */
  readonly state: string;
  /** clean | problems | failed | cancelled | interrupted; null while queued or running (job-outcome.ts). */
  readonly outcome: string | null;
  readonly objects_done: number;
  readonly objects_total: number | null;
  readonly bytes_done: number;
  readonly bytes_total: number | null;
  readonly started_at: string;
  readonly finished_at: string | null;
}

export interface PoolView {
  readonly threads: number;
  readonly busy: number;
  readonly queued: number;
  /** 0..1 */
  readonly utilization: number;
}

/** Where the dashboard learns about the pool and jobs; the defaults report an idle pool and no jobs. */
export interface WorkSource {
  pool(): PoolView;
  jobs(): Promise<{ running: readonly JobView[]; recent: readonly JobView[] }>;
}

export interface Overview {
  readonly generated_at: string;
  readonly started_at: string;
  readonly repositories: number;
  readonly objects: number;
  /** Repository references (an object held by two repositories counts twice). */
  readonly references: number;
  readonly logical_bytes: number;
  readonly unique_bytes: number;
  readonly stored_bytes: number;
  readonly savings: {
    readonly bytes: number;
    /** saved / logical, 0..1. */
    readonly ratio: number;
    readonly by_dedupe_bytes: number;
    readonly by_compression_bytes: number;
  };
  readonly transfers: { readonly last_hour: TransferFigures; readonly last_day: TransferFigures };
  readonly rejections: { readonly since_start: Readonly<Record<string, number>>; readonly last_day: Readonly<Record<string, number>> };
  /** Locks held server-wide; null when locking is not installed. */
  readonly locks: number | null;
  readonly workers: PoolView;
  readonly jobs: { readonly running: readonly JobView[]; readonly recent: readonly JobView[] };
  readonly series: readonly SeriesPoint[];
}

export interface StatsOptions {
  /** SVC_LOCK_MAX_AGE in seconds, or null when locks never go stale. */
  readonly lockMaxAge: number | null;
  /** Worker threads configured (SVC_WORKERS), reported until the pool reports itself. */
  readonly workers: number;
  readonly work?: WorkSource;
}

interface Counters {
  uploads: number;
  uploadBytes: number;
  downloads: number;
  downloadBytes: number;
  rejections: Record<string, number>;
}

const SAMPLE_EVERY_MS = 60_000;
/** An idle server still writes a point this often, so plots span the quiet hours. */
const IDLE_SAMPLE_MS = 3600_000;
const KEEP_SAMPLES_MS = 30 * 86400_000;
const DAY_MS = 86400_000;
const LARGEST_SHOWN = 10;
/** Repositories listed on the dashboard; the card above the list gives the total. */
const REPOS_LISTED = 200;
/** The repository page lists at most this many locks (their total is always given). */
const LOCKS_SHOWN = 200;

const ratio = (saved: number, logical: number): number => (logical > 0 ? Math.round((saved / logical) * 10_000) / 10_000 : 0);

/** Figures for the repository page, its JSON and the dashboard; rates sampled from the Prometheus counters each minute into SQLite, so plots survive a restart. */
export class StatsService {
  readonly #repo: StatsIndex;
  readonly #metrics: Metrics;
  readonly #opts: StatsOptions;
  readonly #startedAt = Date.now();
  #baseline: Counters = { uploads: 0, uploadBytes: 0, downloads: 0, downloadBytes: 0, rejections: {} };
  #timer: NodeJS.Timeout | null = null;
  #sampling: Promise<void> | null = null;

  constructor(repo: StatsIndex, metrics: Metrics, opts: StatsOptions) {
    this.#repo = repo;
    this.#metrics = metrics;
    this.#opts = opts;
  }

  async repoStats(repo: RepoName): Promise<RepoStats> {
    const now = Date.now();
    const [s, locks, audit, largest, histogram] = await Promise.all([
      this.#repo.repoSummary(repo.key),
      this.#repo.locks(repo.key, LOCKS_SHOWN),
      this.#repo.lastAudit(repo.key),
      this.#repo.largestObjects(repo.key, LARGEST_SHOWN),
      this.#repo.sizeHistogram(repo.key),
    ]);
    const maxAge = this.#opts.lockMaxAge;
    return {
      repository: repo.key,
      generated_at: new Date(now).toISOString(),
      objects: s.objects,
      logical_bytes: s.logicalBytes,
      stored_bytes: s.storedBytes,
      saved_bytes: s.logicalBytes - s.storedBytes,
      saving_ratio: ratio(s.logicalBytes - s.storedBytes, s.logicalBytes),
      largest_objects: largest.map((o) => ({
        oid: o.oid,
        size: o.size,
        stored_size: o.storedSize,
        created_at: new Date(o.createdAt).toISOString(),
      })),
      size_histogram: histogram,
      locks: {
        available: true,
        total: locks.total,
        max_age_seconds: maxAge,
        items: locks.items.map((l) => {
          const age = Math.max(0, Math.floor((now - l.lockedAt) / 1000));
          return { id: l.id, path: l.path, owner: l.ownerName, locked_at: new Date(l.lockedAt).toISOString(), age_seconds: age, stale: maxAge !== null && age >= maxAge };
        }),
      },
      last_audit:
        audit === null
          ? null
          : {
              finished_at: new Date(audit.finishedAt).toISOString(),
              objects: audit.objects,
              bytes: audit.bytes,
              corrupt: audit.corrupt,
              unreadable: audit.unreadable,
              complete: audit.complete,
              ok: audit.complete && audit.corrupt === 0 && audit.unreadable === 0,
            },
    };
  }

  async repositoryList(): Promise<RepoListItem[]> {
    return (await this.#repo.repositoryList(REPOS_LISTED)).map((r) => ({
      repository: r.repo,
      objects: r.objects,
      logical_bytes: r.logicalBytes,
      last_audit: r.audit === null ? null : r.audit.ok ? 'clean' : 'problems',
    }));
  }

  async jobs(): Promise<{ running: readonly JobView[]; recent: readonly JobView[] }> {
    return (await this.#opts.work?.jobs()) ?? { running: [], recent: [] };
  }

  async overview(): Promise<Overview> {
    const now = Date.now();
    const [totals, counters, samples, locks] = await Promise.all([
      this.#repo.serverTotals(),
      this.#readCounters(),
      this.#repo.samplesSince(now - DAY_MS),
      this.#repo.lockTotal(),
    ]);
    const live = this.#delta(counters, this.#baseline);
    const sum = (since: number): TransferFigures => {
      const f = { uploads: live.uploads, upload_bytes: live.uploadBytes, downloads: live.downloads, download_bytes: live.downloadBytes };
      for (const s of samples) {
        if (s.at <= since) continue;
        f.uploads += s.uploads;
        f.upload_bytes += s.uploadBytes;
        f.downloads += s.downloads;
        f.download_bytes += s.downloadBytes;
      }
      return f;
    };
    const lastDayRejections: Record<string, number> = { ...live.rejections };
    for (const s of samples) for (const [cause, n] of Object.entries(s.rejections)) lastDayRejections[cause] = (lastDayRejections[cause] ?? 0) + n;
    const toPoint = (s: StatsSample): SeriesPoint => ({
      at: new Date(s.at).toISOString(),
      repositories: s.repositories,
      objects: s.objects,
      logical_bytes: s.logicalBytes,
      stored_bytes: s.storedBytes,
      uploads: s.uploads,
      upload_bytes: s.uploadBytes,
      downloads: s.downloads,
      download_bytes: s.downloadBytes,
    });
    const nowPoint = this.#sampleOf(now, totals, live);
    const saved = totals.logicalBytes - totals.storedBytes;
    return {
      generated_at: new Date(now).toISOString(),
      started_at: new Date(this.#startedAt).toISOString(),
      repositories: totals.repositories,
      objects: totals.objects,
      references: totals.references,
      logical_bytes: totals.logicalBytes,
      unique_bytes: totals.uniqueBytes,
      stored_bytes: totals.storedBytes,
      savings: {
        bytes: saved,
        ratio: ratio(saved, totals.logicalBytes),
        by_dedupe_bytes: totals.logicalBytes - totals.uniqueBytes,
        by_compression_bytes: totals.uniqueBytes - totals.storedBytes,
      },
      transfers: { last_hour: sum(now - 3600_000), last_day: sum(now - DAY_MS) },
      rejections: { since_start: counters.rejections, last_day: lastDayRejections },
      locks,
      workers: this.#opts.work?.pool() ?? { threads: this.#opts.workers, busy: 0, queued: 0, utilization: 0 },
      jobs: await this.jobs(),
      series: [...samples.map(toPoint), toPoint(nowPoint)],
    };
  }

  start(): void {
    if (this.#timer !== null) return;
    void this.sample().catch(() => undefined);
    this.#timer = setInterval(() => void this.sample().catch(() => undefined), SAMPLE_EVERY_MS);
    this.#timer.unref();
  }

  /** Stops the sampler and writes a last point, so a restart does not lose the last minute's transfers. */
  async close(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    await this.sample(true);
  }

  /** Writes a point when anything moved (or an hour passed); never overlapped. */
  sample(force = false): Promise<void> {
    if (this.#sampling !== null) return this.#sampling;
    this.#sampling = (async () => {
      const now = Date.now();
      const counters = await this.#readCounters();
      const delta = this.#delta(counters, this.#baseline);
      const [totals, last] = await Promise.all([this.#repo.serverTotals(), this.#repo.lastSample()]);
      const moved =
        delta.uploads + delta.downloads + delta.uploadBytes + delta.downloadBytes > 0 ||
        Object.keys(delta.rejections).length > 0 ||
        last === null ||
        last.objects !== totals.objects ||
        last.logicalBytes !== totals.logicalBytes ||
        last.storedBytes !== totals.storedBytes ||
        last.repositories !== totals.repositories;
      if (!moved && (force || (last !== null && now - last.at < IDLE_SAMPLE_MS))) return;
      await this.#repo.insertSample(this.#sampleOf(now, totals, delta));
      this.#baseline = counters;
      await this.#repo.pruneSamples(now - KEEP_SAMPLES_MS);
    })().finally(() => {
      this.#sampling = null;
    });
    return this.#sampling;
  }

  #sampleOf(at: number, totals: ServerTotals, d: Counters): StatsSample {
    return {
      at,
      repositories: totals.repositories,
      objects: totals.objects,
      logicalBytes: totals.logicalBytes,
      storedBytes: totals.storedBytes,
      uploads: d.uploads,
      uploadBytes: d.uploadBytes,
      downloads: d.downloads,
      downloadBytes: d.downloadBytes,
      rejections: d.rejections,
    };
  }

  #delta(now: Counters, then: Counters): Counters {
    const rejections: Record<string, number> = {};
    for (const [cause, n] of Object.entries(now.rejections)) {
      const d = n - (then.rejections[cause] ?? 0);
      if (d > 0) rejections[cause] = d;
    }
    return {
      uploads: now.uploads - then.uploads,
      uploadBytes: now.uploadBytes - then.uploadBytes,
      downloads: now.downloads - then.downloads,
      downloadBytes: now.downloadBytes - then.downloadBytes,
      rejections,
    };
  }

  async #readCounters(): Promise<Counters> {
    const c: Counters = { uploads: 0, uploadBytes: 0, downloads: 0, downloadBytes: 0, rejections: {} };
    // Nothing counted yet: reading would build the metrics (load prom-client) only to see zeros.
    if (!this.#metrics.counting) return c;
    const [transfers, bytes, rejections] = await Promise.all([this.#metrics.transfers.get(), this.#metrics.transferCompletedBytes.get(), this.#metrics.rejections.get()]);
    for (const v of transfers.values) {
      if (v.labels.outcome !== 'ok') continue;
      if (v.labels.direction === 'upload') c.uploads += v.value;
      else if (v.labels.direction === 'download') c.downloads += v.value;
    }
    for (const v of bytes.values) {
      if (v.labels.direction === 'upload') c.uploadBytes += v.value;
      else if (v.labels.direction === 'download') c.downloadBytes += v.value;
    }
    for (const v of rejections.values) {
      const cause = String(v.labels.cause ?? 'unknown');
      c.rejections[cause] = (c.rejections[cause] ?? 0) + v.value;
    }
    return c;
  }
}

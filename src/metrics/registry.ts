import type { Counter, Gauge, Registry } from 'prom-client';
import { lazyModule } from '../util/lazy-module.js';
import { VERSION } from '../util/version.js';
import { CachedFigures } from './cached-figures.js';

// Loaded with the first series used (a request answered, a scrape): ~6 MiB, with the Node modules
// it pulls in (http, https, tls, zlib for its push gateway, perf_hooks), a server at rest never needs.
const promClient = lazyModule<typeof import('prom-client')>('prom-client');

/** Server-wide store and lock figures, read from SQLite (StatsRepo) at most once a minute. */
export interface StoreFigures {
  /** Distinct objects in the shared store. */
  readonly objects: number;
  /** Bytes as the repositories hold them (each reference counted). */
  readonly logicalBytes: number;
  /** Bytes on disk after dedupe and compression. */
  readonly storedBytes: number;
  /** Locks held; null when locking is not installed (the series is then left out). */
  readonly locks: number | null;
}

/** One worker pool's load (WorkerPool.stats). */
export interface PoolLoad {
  readonly threads: number;
  readonly queued: number;
  /** 0..1, averaged over the pool's lifetime (Piscina). */
  readonly utilization: number;
  /** Total time the pool's threads spent running tasks (monotonic). */
  readonly busySeconds: number;
}

/** A queued or running maintenance job as the metrics see it: its kind and progress, never its repository. */
export interface JobFigures {
  readonly kind: string;
  readonly state: string;
  readonly objects_done: number;
  readonly objects_total: number | null;
  readonly bytes_done: number;
  readonly bytes_total: number | null;
}

/** The latest audit of each repository, summed over repositories (never labelled by one). */
export interface AuditFigures {
  /** Repositories whose last audit read every object and found none wrong. */
  readonly clean: number;
  /** Repositories whose last audit found corrupt or unreadable objects. */
  readonly problemsFound: number;
  /** Repositories whose last audit found nothing wrong but was cut short (shutdown). */
  readonly incomplete: number;
  /** When the most recent clean, complete audit finished (ms since epoch); null when none has. */
  readonly lastSuccessAt: number | null;
}

/** statfs of the data directory's file system, read at scrape time. */
export interface DiskSpace {
  /** Bytes the server's user may still write (statfs bavail × bsize). */
  readonly freeBytes: number;
  readonly sizeBytes: number;
}

/** Where the gauges read their values at scrape time; wired by the composition root (app.ts). */
export interface MetricSources {
  /** Costly (aggregates over every object): called at most once a minute, single-flight. */
  storeFigures(): StoreFigures | Promise<StoreFigures>;
  /** Live load of each pool, keyed by the `pool` label (`transfer`, `maintenance`). */
  pools(): Readonly<Record<string, PoolLoad>>;
  /** Jobs queued or running now. */
  jobs(): readonly JobFigures[] | Promise<readonly JobFigures[]>;
  /** Every job kind, so each kind's series exist (at 0) before its first job. */
  readonly jobKinds: readonly string[];
  /** The disk store's journal group commits so far; null without one (bucket store). */
  journal(): JournalFlushes | null;
  /** References the journal holds that the index has not taken yet (0 without a journal). */
  deferredReferences(): number;
  /** Audit results (SQLite, one row per repository: cheap enough to read at every scrape). */
  audits(): AuditFigures | Promise<AuditFigures>;
  /** Objects under quarantine (found bad by an audit and not uploaded again since). */
  quarantined(): number | Promise<number>;
  /** Free and total bytes of the data directory's file system. */
  dataDir(): Promise<DiskSpace>;
  /** The disk reserve in use (SVC_DISK_RESERVE; 0 without one) and whether free space is below it now. */
  reserve(): { readonly bytes: number; readonly reached: boolean };
  /** What GET /ready would answer: true when the store takes a write. */
  ready(): Promise<boolean>;
  /** The forge lookup budget: calls spent in the current minute and its size (absent: no series). */
  lookupBudget?(): { readonly used: number; readonly limit: number };
  /** Partial resumable (tus) uploads kept now and the bytes they hold (absent: 0). */
  partialUploads?(): { readonly count: number; readonly bytes: number } | Promise<{ readonly count: number; readonly bytes: number }>;
}

export interface JournalFlushes {
  /** Flushes run in line for a lone upload. */
  readonly inLine: number;
  /** Flushes run on the threadpool, each covering one or more records. */
  readonly pooled: number;
  /** Records made durable by those flushes. */
  readonly records: number;
  /** Segments begun in a retired segment written over (see Journal). */
  readonly recycledSegments: number;
  /** Segments begun in a spare written full of zeros. */
  readonly zeroedSegments: number;
  /** Segments grown as records arrived (no spare was ready). */
  readonly plainSegments: number;
}

/**
 * Series that move differently when an upload brings bytes the store already held for another
 * repository (no new object, no new file, no journaled data): together they tell anyone who can
 * upload whether some repository holds a guessed oid. A cache's per-repository series name the
 * repositories its clients use. /metrics shows them only with SVC_METRICS_TOKEN.
 */
export const STORE_WIDE_SERIES: ReadonlySet<string> = new Set([
  'svc_store_objects',
  'svc_store_stored_bytes',
  'svc_data_dir_free_bytes',
  'svc_journal_segments_total',
  'svc_cache_repository_hits_total',
  'svc_cache_repository_misses_total',
]);

/** Store figures are read from SQLite at most this often, however many scrapes arrive (docs/metrics.md). */
export const STORE_FIGURES_MAX_AGE_MS = 60_000;
/** Job and pool figures are live, but one scrape reads them once for all their series. */
const LIVE_FIGURES_MAX_AGE_MS = 250;

/**
 * Every `svc_rejections_total` cause in use, with where it comes from. The first three come from the
 * forge lookup; the access settings add the others. Bounded: a cause is never built
 * from input.
 */
export const REJECTION_CAUSES = {
  lookup_budget_spent: 'the forge lookup budget per minute is spent (503)',
  forge_rate_limited: 'the forge answered with a rate limit (503)',
  forge_unreachable: 'the forge could not be reached or answered garbage (503)',
  repo_not_allowed: 'the repository is outside the allow list of the access settings (403)',
  anonymous_read_disabled: 'anonymous read is turned off in the access settings (401)',
  object_too_large: 'an object is over the maximum object size (per-object 422 in a batch, 413 on a PUT)',
  quota_exceeded: 'an upload would take the repository past its quota (per-object 507)',
} as const;

const noSources: MetricSources = {
  storeFigures: () => ({ objects: 0, logicalBytes: 0, storedBytes: 0, locks: null }),
  pools: () => ({}),
  jobs: () => [],
  jobKinds: [],
  journal: () => null,
  deferredReferences: () => 0,
  audits: () => ({ clean: 0, problemsFound: 0, incomplete: 0, lastSuccessAt: null }),
  quarantined: () => 0,
  dataDir: async () => ({ freeBytes: 0, sizeBytes: 0 }),
  reserve: () => ({ bytes: 0, reached: false }),
  ready: async () => false,
};

/**
 * The one Prometheus registry. Every series this server exposes is declared here and nowhere else,
 * so names and labels stay consistent and documented in one place. Labels are bounded: routes are
 * the names given to HttpServer.route (templates, never an oid or a repository), statuses are HTTP
 * codes, the rest are fixed words. The registry and its series are built at their first use
 * (Series), so a server that has answered nothing has not loaded prom-client; what /metrics shows
 * is the same either way.
 */
export class Metrics {
  #series: Series | null = null;
  readonly #sources: () => MetricSources;

  /**
   * `sources`: what the gauges read at scrape time; without it they report an empty server. A
   * function, because what it reads (the maintenance service, for one) counts into these metrics
   * and so is built after them.
   */
  constructor(sources: () => MetricSources = () => noSources) {
    this.#sources = sources;
  }

  #use(): Series {
    return (this.#series ??= new Series(this.#sources));
  }

  /** False until a series was first used: until then every counter is still at zero. */
  get counting(): boolean {
    return this.#series !== null;
  }

  /** The registry /metrics exposes. */
  get registry(): Registry {
    return this.#use().registry;
  }

  /**
   * The Prometheus text exposition: every series when `storeWide`, else all but STORE_WIDE_SERIES
   * (which are then not even collected).
   */
  async exposition(storeWide: boolean): Promise<string> {
    const registry = this.registry;
    if (storeWide) return registry.metrics();
    const names = registry.getMetricsAsArray().map((m) => m.name).filter((n) => !STORE_WIDE_SERIES.has(n));
    // The same layout as Registry.metrics(): blocks separated by a blank line, a final newline.
    return `${(await Promise.all(names.map((n) => registry.getSingleMetricAsString(n)))).join('\n\n')}\n`;
  }

  /** See Series.requests. */
  get requests(): Series['requests'] {
    return this.#use().requests;
  }

  /** See Series.requestSeconds. */
  get requestSeconds(): Series['requestSeconds'] {
    return this.#use().requestSeconds;
  }

  /** See Series.rejections. */
  get rejections(): Series['rejections'] {
    return this.#use().rejections;
  }

  /** See Series.transferBytes. */
  get transferBytes(): Series['transferBytes'] {
    return this.#use().transferBytes;
  }

  /** See Series.transferCompletedBytes. */
  get transferCompletedBytes(): Series['transferCompletedBytes'] {
    return this.#use().transferCompletedBytes;
  }

  /** See Series.transfers. */
  get transfers(): Series['transfers'] {
    return this.#use().transfers;
  }

  /** See Series.forgeLookups. */
  get forgeLookups(): Series['forgeLookups'] {
    return this.#use().forgeLookups;
  }

  /** See Series.authCacheHits. */
  get authCacheHits(): Series['authCacheHits'] {
    return this.#use().authCacheHits;
  }

  /** See Series.authCacheMisses. */
  get authCacheMisses(): Series['authCacheMisses'] {
    return this.#use().authCacheMisses;
  }

  /** See Series.uploadSeconds. */
  get uploadSeconds(): Series['uploadSeconds'] {
    return this.#use().uploadSeconds;
  }

  /** See Series.inFlight. */
  get inFlight(): Series['inFlight'] {
    return this.#use().inFlight;
  }
}

/** Every series, on its own registry; built once, by Metrics at the first use. */
class Series {
  readonly #prom = promClient();
  readonly registry = new this.#prom.Registry();
  /** Where the scrape-time gauges read (see the Metrics constructor). */
  readonly #sources: () => MetricSources;
  #store = new CachedFigures(() => this.#sources().storeFigures(), STORE_FIGURES_MAX_AGE_MS);
  #jobs = new CachedFigures(() => this.#sources().jobs(), LIVE_FIGURES_MAX_AGE_MS);

  /** Traffic by endpoint and outcome: the first thing to look at when clients report errors. */
  readonly requests = new this.#prom.Counter({
    name: 'svc_requests_total',
    help: 'HTTP requests answered, by route name and status (499: the client went away first)',
    labelNames: ['route', 'status'] as const,
    registers: [this.registry],
  });

  /** Latency by endpoint and outcome, so a slow batch (forge lookups) is told apart from a slow download. */
  readonly requestSeconds = new this.#prom.Histogram({
    name: 'svc_request_duration_seconds',
    help: 'Time from the request arriving to its answer being finished, by route name and status',
    labelNames: ['route', 'status'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, 600],
    registers: [this.registry],
  });

  /** Why clients are refused (causes: REJECTION_CAUSES), so an outage of the forge is told apart from policy. */
  readonly rejections = new this.#prom.Counter({
    name: 'svc_rejections_total',
    help: `Requests or objects refused, by cause (${Object.keys(REJECTION_CAUSES).join(', ')})`,
    labelNames: ['cause'] as const,
    registers: [this.registry],
  });

  /** Throughput, counted chunk by chunk as bodies stream, so rate() shows a long transfer while it runs. */
  readonly transferBytes = new this.#prom.Counter({
    name: 'svc_transfer_bytes_total',
    help: 'Object bytes streamed through this server as they flow, by direction (failed transfers included; presigned bucket uploads counted at verify)',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });

  /** What completed transfers carried (the dashboard's figures); streamed minus this is what failures wasted. */
  readonly transferCompletedBytes = new this.#prom.Counter({
    name: 'svc_transfer_completed_bytes_total',
    help: 'Object bytes of completed transfers: an acknowledged upload\'s size, a fully sent download',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });

  /** Transfer outcomes, to alert on a rising share of failed uploads or downloads. */
  readonly transfers = new this.#prom.Counter({
    name: 'svc_transfers_total',
    help: 'Object transfers finished, by direction and outcome (ok, failed)',
    labelNames: ['direction', 'outcome'] as const,
    registers: [this.registry],
  });

  /** Forge load and health: every lookup made (cache misses), by what the forge answered. */
  readonly forgeLookups = new this.#prom.Counter({
    name: 'svc_forge_lookups_total',
    help: 'Forge repository lookups made (cache misses), by result (granted, denied, not_found, forge_rate_limited, forge_unreachable, …)',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  /** With the misses, the cache's hit ratio: how much forge traffic the grant cache saves. */
  readonly authCacheHits = new this.#prom.Counter({
    name: 'svc_auth_cache_hits_total',
    help: 'Authorizations answered from cache, by kind (granted, refused: the access cache; identity: the token owner cache)',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  /** A miss costs a forge call (or joins one in flight); a high rate means short TTLs or many distinct tokens. */
  readonly authCacheMisses = new this.#prom.Counter({
    name: 'svc_auth_cache_misses_total',
    help: 'Authorizations not in cache, which asked the forge or joined a lookup in flight, by kind (access, identity)',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  /** The upload acknowledgement latency clients feel (first byte to durable 200). */
  readonly uploadSeconds = new this.#prom.Histogram({
    name: 'svc_upload_duration_seconds',
    help: 'Time from first byte to durable acknowledgement of an upload',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600],
    registers: [this.registry],
  });

  /** Concurrency right now, to size SVC_WORKERS and see what a shutdown would cut. */
  readonly inFlight = new this.#prom.Gauge({
    name: 'svc_transfers_in_flight',
    help: 'Object transfers currently streaming, by direction',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });

  /** Capacity planning: distinct objects held (recomputed at most once a minute). */
  readonly storeObjects = this.#storeGauge('svc_store_objects', 'Distinct objects in the shared store (refreshed at most once a minute)', (f) => f.objects);

  /** What clients uploaded as the repositories see it; with stored bytes, what dedupe and compression save. */
  readonly storeLogicalBytes = this.#storeGauge(
    'svc_store_logical_bytes',
    'Bytes the repositories hold, each reference counted (refreshed at most once a minute)',
    (f) => f.logicalBytes,
  );

  /** Disk actually used by objects, after dedupe and compression. */
  readonly storeStoredBytes = this.#storeGauge(
    'svc_store_stored_bytes',
    'Bytes the objects occupy in the store after dedupe and compression (refreshed at most once a minute)',
    (f) => f.storedBytes,
  );

  /** Locks held: a count that only grows points at clients that never unlock. */
  readonly locksHeld = this.#storeGauge('svc_locks_held', 'File locks held server-wide (refreshed at most once a minute)', (f) => f.locks);

  /** Threads per pool, the denominator of the busy figures. */
  readonly poolThreads = this.#poolGauge('svc_worker_pool_threads', 'Worker threads of each pool (transfer: upload frames; maintenance: jobs)', (p) => p.threads);

  /**
   * Recent load: rate(svc_worker_pool_busy_seconds_total[5m]) / threads is the share of the pool in
   * use lately; a transfer pool near 1 means SVC_WORKERS is too small for the upload load.
   */
  readonly poolBusySeconds = this.#poolBusyCounter();

  /**
   * Group commit at work: records / flushes is how many uploads share one fdatasync (near 1 with a
   * sequential client, whose flushes run in line; higher under parallel uploads).
   */
  readonly journalFlushes = this.#journalCounter('svc_journal_flushes_total', 'Journal fdatasyncs, by mode (inline: on the event loop, for a lone upload or small ones while flushes are quick; pooled: on the threadpool)', ['mode'], (j) => [
    [{ mode: 'inline' }, j.inLine],
    [{ mode: 'pooled' }, j.pooled],
  ]);

  readonly journalRecords = this.#journalCounter('svc_journal_records_total', 'Journal records made durable (one per acknowledged upload)', [], (j) => [[{}, j.records]]);

  /** Recycled segments save 16 MiB of zero writes each: a burst that outgrows them shows as zeroed ones. */
  readonly journalSegments = this.#journalCounter('svc_journal_segments_total', 'Journal segments begun, by how their blocks were readied (recycled: a retired segment written over; zeroed: a spare written full of zeros; plain: grown as records arrive)', ['start'], (j) => [
    [{ start: 'recycled' }, j.recycledSegments],
    [{ start: 'zeroed' }, j.zeroedSegments],
    [{ start: 'plain' }, j.plainSegments],
  ]);

  /** Tasks waiting for a thread: a growing queue means work arrives faster than the pool does it. */
  readonly poolQueued = this.#poolGauge('svc_worker_pool_queued_tasks', 'Tasks waiting for a worker thread, by pool', (p) => p.queued);

  /** Load of each pool since it started (Piscina's utilization, what the dashboard shows), 0..1. */
  readonly poolUtilization = this.#poolGauge(
    'svc_worker_pool_utilization_ratio',
    'Share of the pool\'s thread time spent on tasks since it started (0..1), by pool',
    (p) => p.utilization,
  );

  /** Maintenance in progress by kind, so a stuck or piling-up job kind shows. */
  readonly jobsActive = this.#jobGauge('svc_maintenance_jobs', 'Maintenance jobs queued or running, by kind and state', ['kind', 'state'], (j) => ({
    key: { kind: j.kind, state: j.state },
    value: 1,
  }));

  /** Progress of the running jobs (objects), with the planned total: done / planned is the completion. */
  readonly jobObjectsDone = this.#jobGauge('svc_maintenance_job_done_objects', 'Objects the running maintenance jobs have done, by kind', ['kind'], (j) => ({ key: { kind: j.kind }, value: j.objects_done }));

  /** The total the running jobs will go through (0 until a job has counted its work). */
  readonly jobObjectsPlanned = this.#jobGauge('svc_maintenance_job_planned_objects', 'Objects the running maintenance jobs will go through, by kind (0 until counted)', ['kind'], (j) => ({
    key: { kind: j.kind },
    value: j.objects_total ?? 0,
  }));

  /** Progress of the running jobs in bytes (big objects dominate the time a job takes). */
  readonly jobBytesDone = this.#jobGauge('svc_maintenance_job_done_bytes', 'Bytes the running maintenance jobs have done, by kind', ['kind'], (j) => ({ key: { kind: j.kind }, value: j.bytes_done }));

  /** The bytes the running jobs will go through (0 until counted). */
  readonly jobBytesPlanned = this.#jobGauge('svc_maintenance_job_planned_bytes', 'Bytes the running maintenance jobs will go through, by kind (0 until counted)', ['kind'], (j) => ({
    key: { kind: j.kind },
    value: j.bytes_total ?? 0,
  }));

  /**
   * Which build is running, the Prometheus convention (`*_build_info` = 1, the version a label), so a
   * dashboard can show it and a query can join on it. Named for the product, without the
   * `svc_` prefix of the service's own series.
   */
  readonly buildInfo = new this.#prom.Gauge({
    name: 'stowage_build_info',
    help: 'Always 1; the running version is the label',
    labelNames: ['version'] as const,
    registers: [this.registry],
  });

  /** The outcome of each repository's last audit: any `problems_found` means objects were corrupt or unreadable. */
  readonly auditRepositories = this.#auditGauge();

  /** When an audit last finished clean; the time since it shows whether audits still run. */
  readonly auditLastSuccess = new this.#prom.Gauge({
    name: 'svc_audit_last_success_timestamp_seconds',
    help: 'Unix time the most recent audit that read every object and found none wrong finished (0: none yet)',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => {
      const at = (await s.audits()).lastSuccessAt;
      g.set(at === null ? 0 : at / 1000);
    }),
  });

  /** Acknowledged uploads the index has not recorded yet: missing to their repositories until it does (durability.md). */
  readonly journalDeferredReferences = new this.#prom.Gauge({
    name: 'svc_journal_deferred_references',
    help: 'References of acknowledged uploads that the journal keeps because the index refused them (a full disk, a write lock held elsewhere, an I/O error); their objects are missing to their repositories until the index takes them',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set(s.deferredReferences())),
  });

  /** Objects an audit set aside: each needs a good copy pushed again before clients can fetch it. */
  readonly quarantinedObjects = new this.#prom.Gauge({
    name: 'svc_quarantined_objects',
    help: 'Objects under quarantine (found corrupt or unreadable by an audit, not uploaded again since)',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set(await s.quarantined())),
  });

  /** Room left for uploads and the index (statfs at scrape time, like node_filesystem_avail_bytes). */
  readonly dataDirFree = new this.#prom.Gauge({
    name: 'svc_data_dir_free_bytes',
    help: 'Bytes still writable by this server on the data directory\'s file system (statfs, read at scrape time)',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set((await s.dataDir()).freeBytes)),
  });

  /** The file system's size, the denominator of the disk-nearly-full alert. */
  readonly dataDirSize = new this.#prom.Gauge({
    name: 'svc_data_dir_size_bytes',
    help: 'Size of the data directory\'s file system in bytes (statfs, read at scrape time)',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set((await s.dataDir()).sizeBytes)),
  });

  /** Free space new objects never take (SVC_DISK_RESERVE), so retain and the index keep room. */
  readonly storeReserve = new this.#prom.Gauge({
    name: 'svc_store_reserve_bytes',
    help: 'Free bytes of the data directory\'s file system that uploads never take (SVC_DISK_RESERVE; 0 with none, or with the bucket store)',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set(s.reserve().bytes)),
  });

  /** Uploads are being refused with 507 until retain (or more disk) frees room. */
  readonly storeReserveReached = new this.#prom.Gauge({
    name: 'svc_store_reserve_reached',
    help: '1 while free space on the data directory\'s file system is below the reserve, so new uploads get 507 (statfs, read at scrape time), else 0',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set(s.reserve().reached ? 1 : 0)),
  });

  /** Resumable uploads begun and not finished: disk they hold until they finish or are swept (SVC_UPLOAD_RESUME_TTL). */
  readonly partialUploads = new this.#prom.Gauge({
    name: 'svc_partial_uploads',
    help: 'Partial resumable (tus) uploads kept for their client to resume (removed when they finish, are terminated, or after SVC_UPLOAD_RESUME_TTL)',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set((await s.partialUploads?.())?.count ?? 0)),
  });

  readonly partialUploadBytes = new this.#prom.Gauge({
    name: 'svc_partial_upload_bytes',
    help: 'Durable bytes held by partial resumable (tus) uploads (the data directory, or the bucket\'s uploads/ parts)',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set((await s.partialUploads?.())?.bytes ?? 0)),
  });

  /** GET /ready's answer as a series, so an alert needs no separate HTTP probe. */
  readonly ready = new this.#prom.Gauge({
    name: 'svc_ready',
    help: '1 when the store takes a write (what GET /ready checks, run at scrape time), else 0',
    registers: [this.registry],
    collect: this.#sourced(async (s, g) => g.set((await s.ready()) ? 1 : 0)),
  });

  /** Forge calls spent in the sliding minute; near the limit, legitimate clients are about to get 503. */
  readonly lookupBudgetUsed = new this.#prom.Gauge({
    name: 'svc_forge_lookup_budget_used',
    help: 'Forge calls made in the last minute, all counted against SVC_AUTH_LOOKUP_BUDGET (read at scrape time)',
    registers: [this.registry],
    collect: this.#sourced((s, g) => {
      const b = s.lookupBudget?.();
      g.reset();
      if (b !== undefined) g.set(b.used);
    }),
  });

  /** The budget's size (SVC_AUTH_LOOKUP_BUDGET), the denominator of the figure above. */
  readonly lookupBudgetLimit = new this.#prom.Gauge({
    name: 'svc_forge_lookup_budget_limit',
    help: 'Forge calls allowed per minute, server-wide (SVC_AUTH_LOOKUP_BUDGET)',
    registers: [this.registry],
    collect: this.#sourced((s, g) => {
      const b = s.lookupBudget?.();
      g.reset();
      if (b !== undefined) g.set(b.limit);
    }),
  });

  constructor(sources: () => MetricSources) {
    this.#sources = sources;
    // Standard names (process_cpu_seconds_total, nodejs_heap_size_used_bytes …) so stock Node.js
    // dashboards and alerts work as they are.
    this.#prom.collectDefaultMetrics({ register: this.registry });
    // These three are gauges named *_total, which Prometheus' naming lint (promtool check metrics)
    // refuses; each is only the sum of its labelled twin (nodejs_active_handles{type} etc.).
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
      this.registry.removeSingleMetric(name);
    }
    this.buildInfo.set({ version: VERSION }, 1);
    // Zero series exist from the start, so rate() and dashboards need no special case for "none yet".
    for (const direction of ['upload', 'download']) {
      this.transferBytes.inc({ direction }, 0);
      this.transferCompletedBytes.inc({ direction }, 0);
    }
  }

  /** A collect() that reads the sources at scrape time. */
  #sourced(read: (sources: MetricSources, gauge: Gauge) => void | Promise<void>): (this: Gauge) => Promise<void> {
    const sources = (): MetricSources => this.#sources();
    return async function (this: Gauge) {
      await read(sources(), this);
    };
  }

  #auditGauge(): Gauge<'result'> {
    const sources = (): MetricSources => this.#sources();
    return new this.#prom.Gauge({
      name: 'svc_audit_repositories',
      help: 'Repositories by the outcome of their last audit (clean, problems_found: corrupt or unreadable objects, incomplete: cut short)',
      labelNames: ['result'] as const,
      registers: [this.registry],
      async collect() {
        const a = await sources().audits();
        this.set({ result: 'clean' }, a.clean);
        this.set({ result: 'problems_found' }, a.problemsFound);
        this.set({ result: 'incomplete' }, a.incomplete);
      },
    });
  }

  #storeGauge(name: string, help: string, pick: (f: StoreFigures) => number | null): Gauge {
    const store = (): CachedFigures<StoreFigures> => this.#store;
    return new this.#prom.Gauge({
      name,
      help,
      registers: [this.registry],
      async collect() {
        const v = pick(await store().get());
        this.reset();
        if (v !== null) this.set(v);
      },
    });
  }

  #poolGauge(name: string, help: string, pick: (p: PoolLoad) => number): Gauge<'pool'> {
    const sources = (): MetricSources => this.#sources();
    return new this.#prom.Gauge({
      name,
      help,
      labelNames: ['pool'] as const,
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [pool, load] of Object.entries(sources().pools())) this.set({ pool }, pick(load));
      },
    });
  }

  /** A counter mirroring the journal's own running totals at scrape time. */
  #journalCounter<L extends string>(name: string, help: string, labelNames: L[], pick: (j: JournalFlushes) => [Partial<Record<L, string>>, number][]): Counter<L> {
    const sources = (): MetricSources => this.#sources();
    return new this.#prom.Counter({
      name,
      help,
      labelNames,
      registers: [this.registry],
      collect() {
        this.reset();
        const j = sources().journal() ?? { inLine: 0, pooled: 0, records: 0, recycledSegments: 0, zeroedSegments: 0, plainSegments: 0 };
        for (const [labels, value] of pick(j)) this.inc(labels as never, value);
      },
    });
  }

  #poolBusyCounter(): Counter<'pool'> {
    const sources = (): MetricSources => this.#sources();
    return new this.#prom.Counter({
      name: 'svc_worker_pool_busy_seconds_total',
      help: 'Time the pool\'s threads spent running tasks, by pool',
      labelNames: ['pool'] as const,
      registers: [this.registry],
      collect() {
        // The pool keeps the running total itself: mirror it (reset + inc sets the value).
        this.reset();
        for (const [pool, load] of Object.entries(sources().pools())) this.inc({ pool }, load.busySeconds);
      },
    });
  }

  /** A gauge summed over the jobs queued or running; every kind's series exists, at 0 when idle. */
  #jobGauge<L extends string>(name: string, help: string, labelNames: L[], pick: (j: JobFigures) => { key: Record<L, string>; value: number }): Gauge<L> {
    const jobs = (): CachedFigures<readonly JobFigures[]> => this.#jobs;
    const kinds = (): readonly string[] => this.#sources().jobKinds;
    const withState = labelNames.includes('state' as L);
    return new this.#prom.Gauge({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        const sums = new Map<string, { key: Record<L, string>; value: number }>();
        const add = (key: Record<L, string>, value: number): void => {
          const id = JSON.stringify(key);
          sums.set(id, { key, value: (sums.get(id)?.value ?? 0) + value });
        };
        for (const kind of kinds()) {
          if (withState) for (const state of ['queued', 'running']) add({ kind, state } as Record<L, string>, 0);
          else add({ kind } as Record<L, string>, 0);
        }
        for (const j of await jobs().get()) {
          // Progress series count running jobs only; the jobs series also counts queued ones.
          if (!withState && j.state !== 'running') continue;
          const { key, value } = pick(j);
          add(key, value);
        }
        this.reset();
        for (const { key, value } of sums.values()) this.set(key as never, value);
      },
    });
  }
}

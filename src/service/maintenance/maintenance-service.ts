import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Hasher } from '../../format/frame-codec.js';
import type { Index } from '../../db/index-types.js';
import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import { resolveImportSource, type ImportLayout } from '../../store/foreign-layout.js';
import { lfsError } from '../../errors/errors.js';
import type { WorkerPool } from '../../workers/pool.js';
import type { JobView, PoolView, WorkSource } from '../stats-service.js';
import { JobRunner, SERVER_WIDE, type Job, type JobDetail } from './job-runner.js';
import type { KeyRing } from '../../crypto/key-ring.js';
import type { MaintenanceDeps, NodeIdentity, PartialUploadSweep, UploadGate } from './maintenance-deps.js';
import type { WorkerTasks } from './worker-tasks.js';
import type { BlobStore } from '../../store/types.js';
import { readingStore } from '../../store/compose.js';
import type { DataKeySweepDeps } from './data-key-sweep.js';
import type { RetirableJournal, RewrapDeps } from './rewrap-job.js';

/** The one node of an embedded index: it never heartbeats, so its intents count as a stopped node's to the next retain. */
const LOCAL_NODE: NodeIdentity = { id: '', liveSince: () => Date.now(), sweep: (run) => run() };

export interface MaintenanceOptions {
  readonly index: Index;
  /** This node when the index is shared by several (job leases, intents); null for the one node of an embedded index. */
  readonly node: NodeIdentity | null;
  readonly store: BlobStore;
  /** The raw backend under that stack (disk or S3): compress writes through compressingStore(backend). */
  readonly backend: BlobStore;
  /** The low-priority maintenance pool; the composition root closes it after close(). */
  readonly codec: WorkerTasks;
  /** The Hasher: audit hashes large objects with it, and compress's verify layer does. */
  readonly hasher: Hasher;
  readonly pool: WorkerPool;
  /** TransferService: uploads in flight and the per-oid deletion gate. */
  readonly uploads: UploadGate;
  readonly graceSeconds: number;
  /** SVC_STAGING_MAX_AGE: an unfinished write older than this is litter; the data key sweep's grace is at least this. */
  readonly stagingMaxAgeSeconds: number;
  /** SVC_COMPRESSION's level, or null when new uploads are stored plain (compress then uses 3). */
  readonly compressionLevel: number | null;
  /** SVC_IMPORT_DIR: the only folder imports read from; null when imports are off. */
  readonly importDir: string | null;
  /** Partial resumable uploads, which retain also removes; none when resumable uploads are off. */
  readonly partials?: PartialUploadSweep | null;
  /** The key ring (SVC_ENCRYPTION_KEY_FILE or _COMMAND); null when no keys are configured: rewrap is refused. */
  readonly keys: KeyRing | null;
  /** The backend itself, under the encrypting layer: rekey and encrypt read each copy's header there. */
  readonly stored: BlobStore;
  /** SVC_REWRAP_BATCH: data-key rows the rewrap job reads per query. */
  readonly rewrapBatch: number;
  /** The node-local journal (a single node on its disk), which rewrap retires so old keys can go. */
  readonly journal?: RetirableJournal | null;
  readonly log: (msg: string, fields: object) => void;
}

/**
 * Maintenance jobs while serving, through the BlobStore contract, with whole-file work on the
 * low-priority pool; also the dashboard's WorkSource. Access is decided by the caller (the route).
 */
export class MaintenanceService implements WorkSource {
  readonly #deps: MaintenanceDeps;
  readonly #runner: JobRunner;
  readonly #pool: WorkerPool;
  readonly #importDir: string | null;
  /** Each repository's latest import job and the folder it reads (the runner joins jobs by kind only). */
  readonly #imports = new Map<string, { from: string; job: Job }>();
  readonly #rewrap: Omit<RewrapDeps, 'keys' | 'sweep'> & { keys: KeyRing | null };
  /** What rewrap's sweep of unused data key rows works with, when asked for. */
  readonly #sweep: DataKeySweepDeps;
  readonly #stored: BlobStore;

  private constructor(deps: MaintenanceDeps, runner: JobRunner, pool: WorkerPool, o: MaintenanceOptions) {
    this.#deps = deps;
    this.#runner = runner;
    this.#pool = pool;
    this.#importDir = o.importDir;
    this.#rewrap = { keys: o.keys, dataKeys: o.index.dataKeys, batch: o.rewrapBatch, journal: o.journal ?? null, log: o.log };
    this.#sweep = {
      dataKeys: o.index.dataKeys,
      stored: o.stored,
      graceMs: Math.max(o.graceSeconds, o.stagingMaxAgeSeconds) * 1000,
      now: Date.now,
      parallelism: o.codec.parallelism,
      log: o.log,
    };
    this.#stored = o.stored;
  }

  static async open(o: MaintenanceOptions): Promise<MaintenanceService> {
    const deps: MaintenanceDeps = {
      store: o.store,
      backend: o.backend,
      reader: readingStore(o.backend, o.codec),
      hasher: o.hasher,
      objects: o.index.objects,
      maint: o.index.maintenance,
      stats: o.index.stats,
      uploads: o.uploads,
      node: o.node ?? LOCAL_NODE,
      tasks: o.codec,
      graceMs: o.graceSeconds * 1000,
      compressionLevel: o.compressionLevel ?? 3,
      partials: o.partials ?? null,
      log: o.log,
    };
    // No job runs yet: whatever a killed job of an earlier version left in the jobs' staging folder is litter.
    const legacy = o.store.legacy;
    if (legacy !== null) {
      const staging = await legacy.maintenanceStaging();
      for (const name of await readdir(staging)) await legacy.purge(join(staging, name)).catch(() => undefined);
    }
    return new MaintenanceService(deps, await JobRunner.open(o.index.jobs, o.node, o.log), o.pool, o);
  }

  // Each job's module is imported when a job of its kind starts: a server at rest runs none.
  retain(repo: RepoName, keep: ReadonlySet<Oid>, dryRun: boolean): Promise<Job> {
    return this.#runner.start('retain', repo.key, dryRun, async (ctx) => (await import('./retain-job.js')).runRetain(this.#deps, repo, keep, dryRun, ctx));
  }

  dedupe(repo: RepoName): Promise<Job> {
    return this.#runner.start('dedupe', repo.key, false, async (ctx) => (await import('./dedupe-job.js')).runDedupe(this.#deps, repo, ctx));
  }

  compress(repo: RepoName, dryRun: boolean): Promise<Job> {
    return this.#runner.start('compress', repo.key, dryRun, async (ctx) => (await import('./compress-job.js')).runCompress(this.#deps, repo, dryRun, ctx));
  }

  /** `source` is relative to SVC_IMPORT_DIR; 404 when imports are off, 422 for a bad or second source. */
  async import(repo: RepoName, layout: ImportLayout, source: string, dryRun: boolean): Promise<Job> {
    if (this.#importDir === null) throw lfsError('LFS_ERR_NOT_FOUND', 'Imports are off on this server: set SVC_IMPORT_DIR to the folder it may read them from');
    const resolved = await resolveImportSource(this.#importDir, source);
    if ('problem' in resolved) throw lfsError('LFS_ERR_BAD_REQUEST', resolved.problem);
    const from = `${layout}:${resolved.path}`;
    const current = this.#imports.get(repo.key);
    if (current !== undefined && current.from !== from && (current.job.state === 'queued' || current.job.state === 'running')) {
      throw lfsError('LFS_ERR_BAD_REQUEST', `Another import into this repository is under way (job ${current.job.id}); start this one when it ends`);
    }
    const job = await this.#runner.start('import', repo.key, dryRun, async (ctx) => (await import('./import-job.js')).runImport(this.#deps, repo, { layout, path: resolved.path, source, dryRun }, ctx));
    this.#imports.set(repo.key, { from, job });
    return job;
  }

  /** `quarantine`: bad objects found are quarantined (the caller checked admin); otherwise only reported. */
  audit(repo: RepoName, quarantine: boolean): Promise<Job> {
    // An audit that may quarantine and one that may not are different jobs (the dry-run flag tells them apart).
    return this.#runner.start('audit', repo.key, !quarantine, async (ctx) => (await import('./audit-job.js')).runAudit(this.#deps, repo, quarantine, ctx));
  }

  /** One job for the whole server; 404 when no keys are configured. `sweep`: unused data key rows go first (reads every stored copy's header). */
  rewrap(sweep: boolean): Promise<Job> {
    const { keys, ...rest } = this.#rewrap;
    if (keys === null) throw lfsError('LFS_ERR_NOT_FOUND', 'No encryption keys are configured on this server (SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND)');
    const swept = sweep ? this.#sweep : null;
    return this.#runner.start('rewrap', SERVER_WIDE, false, async (ctx) => (await import('./rewrap-job.js')).runRewrap({ keys, ...rest, sweep: swept }, ctx));
  }

  serverJobs(): Promise<JobDetail[]> {
    return this.#runner.jobsOf(SERVER_WIDE);
  }

  /** `rekey`: every object under a fresh data key; `encrypt`: those stored in the clear. 404 without keys. */
  reencrypt(kind: 'rekey' | 'encrypt', repo: RepoName): Promise<Job> {
    const { keys, dataKeys } = this.#rewrap;
    if (keys === null) throw lfsError('LFS_ERR_NOT_FOUND', 'No encryption keys are configured on this server (SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND)');
    return this.#runner.start(kind, repo.key, false, async (ctx) => (await import('./reencrypt-job.js')).runReencrypt(this.#deps, { keys, dataKeys, stored: this.#stored }, kind, repo, ctx));
  }

  /** A server-wide job (rewrap) by id; null for an unknown id or a repository's job. */
  serverJob(id: string): Promise<JobDetail | null> {
    return this.#runner.find(SERVER_WIDE, id);
  }

  /** Asks a server-wide job to stop (job-runner.ts); null for an unknown id. */
  cancelServerJob(id: string): Promise<JobDetail | null> {
    return this.#runner.cancel(SERVER_WIDE, id);
  }

  /** A job of this repository (null for an unknown id or another repository's job). */
  job(repo: RepoName, id: string): Promise<JobDetail | null> {
    return this.#runner.find(repo.key, id);
  }

  jobsOf(repo: RepoName): Promise<JobDetail[]> {
    return this.#runner.jobsOf(repo.key);
  }

  /** Asks a job of this repository to stop (job-runner.ts); null for an unknown id. */
  cancel(repo: RepoName, id: string): Promise<JobDetail | null> {
    return this.#runner.cancel(repo.key, id);
  }

  pool(): PoolView {
    const a = this.#pool.stats;
    const b = this.#deps.tasks.stats;
    const threads = a.threads + b.threads;
    const utilization = threads > 0 ? (a.utilization * a.threads + b.utilization * b.threads) / threads : 0;
    return { threads, busy: a.running + b.running, queued: a.queued + b.queued, utilization };
  }

  /** Each pool on its own (the metrics label them `transfer` and `maintenance`). */
  poolLoads(): { transfer: WorkerPool['stats']; maintenance: WorkerPool['stats'] } {
    return { transfer: this.#pool.stats, maintenance: this.#deps.tasks.stats };
  }

  jobs(): Promise<{ running: readonly JobView[]; recent: readonly JobView[] }> {
    return this.#runner.jobs();
  }

  /** Jobs stop at their next object; the maintenance pool is the composition root's to close. */
  async close(): Promise<void> {
    await this.#runner.close();
  }
}

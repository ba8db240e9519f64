import { randomBytes } from 'node:crypto';
import type { JobIndex, JobRow } from '../../db/index-types.js';
import type { NodeIdentity } from './maintenance-deps.js';
import { isLfsError, lfsError } from '../../errors/errors.js';
import { ByteMeter } from '../../workers/byte-meter.js';
import type { JobView } from '../stats-service.js';
import { jobOutcome, type JobState } from './job-outcome.js';

export type JobKind = 'retain' | 'dedupe' | 'compress' | 'audit' | 'import' | 'rewrap' | 'rekey' | 'encrypt';

/** The `repo` of a job that works on the whole server (rewrap): no repository is named so. */
export const SERVER_WIDE = '-';

/** Totals are null until counted; an object read on a worker moves the bytes figure as it is read. */
export class Progress {
  objectsDone = 0;
  objectsTotal: number | null = null;
  bytesTotal: number | null = null;
  #finishedBytes = 0;
  readonly #reading = new Set<ByteMeter>();

  get bytesDone(): number {
    let n = this.#finishedBytes;
    for (const m of this.#reading) n += m.read();
    return this.bytesTotal === null ? n : Math.min(n, this.bytesTotal);
  }

  /** A meter for one object about to be read on a worker; hand it back to objectDone(). */
  meter(): ByteMeter {
    const m = new ByteMeter();
    this.#reading.add(m);
    return m;
  }

  /** One object is finished (or skipped): its `bytes` count whole, and its meter is dropped. */
  objectDone(bytes: number, meter?: ByteMeter): void {
    if (meter !== undefined) this.#reading.delete(meter);
    this.objectsDone++;
    this.#finishedBytes += bytes;
  }
}

/** What a job body gets: a signal aborted at shutdown or on cancel, and the progress it updates in place. */
export interface JobContext {
  readonly signal: AbortSignal;
  readonly progress: Progress;
}

export type JobReport = Record<string, unknown>;
export type JobBody = (ctx: JobContext) => Promise<JobReport>;

/** The progress endpoint's answer: the dashboard's JobView plus the report once done. */
export interface JobDetail extends JobView {
  readonly dry_run: boolean;
  readonly report: unknown;
  readonly error: string | null;
}

/** A job of this process, from queued to finished. */
export class Job {
  // Hex, not base64url: an id starting with '-' reads as an option on the command line (`stowage jobs <id>`).
  readonly id = randomBytes(12).toString('hex');
  readonly kind: JobKind;
  readonly repo: string;
  readonly dryRun: boolean;
  readonly startedAt = Date.now();
  readonly progress = new Progress();
  state: JobState = 'queued';
  /** Aborted by a cancel: the job stops before its next object. */
  readonly cancelled = new AbortController();
  finishedAt: number | null = null;
  report: JobReport | null = null;
  error: unknown = null;
  /** Settles with the report, or rejects with what failed the job. */
  readonly done: Promise<JobReport>;
  #settle!: { resolve: (r: JobReport) => void; reject: (e: unknown) => void };

  constructor(kind: JobKind, repo: string, dryRun: boolean) {
    this.kind = kind;
    this.repo = repo;
    this.dryRun = dryRun;
    this.done = new Promise((resolve, reject) => (this.#settle = { resolve, reject }));
    this.done.catch(() => undefined); // a job nobody waits for must not be an unhandled rejection
  }

  /** @internal the runner settles it. */
  settle(report: JobReport | null, error: unknown): void {
    if (report !== null) this.#settle.resolve(report);
    else this.#settle.reject(error);
  }

  view(): JobDetail {
    return {
      id: this.id,
      kind: this.kind,
      repository: this.repo,
      state: this.state,
      outcome: jobOutcome(this.kind, this.state, this.report),
      dry_run: this.dryRun,
      objects_done: this.progress.objectsDone,
      objects_total: this.progress.objectsTotal,
      bytes_done: this.progress.bytesDone,
      bytes_total: this.progress.bytesTotal,
      started_at: new Date(this.startedAt).toISOString(),
      finished_at: this.finishedAt === null ? null : new Date(this.finishedAt).toISOString(),
      report: this.report,
      error: this.error === null ? null : errorText(this.error),
    };
  }
}

function errorText(e: unknown): string {
  return isLfsError(e) ? e.message : 'the job failed; see the server log';
}

function rowView(r: JobRow): JobDetail {
  return {
    id: r.id,
    kind: r.kind,
    repository: r.repo,
    state: r.state,
    outcome: jobOutcome(r.kind, r.state, r.report),
    dry_run: r.dryRun,
    objects_done: r.objectsDone,
    objects_total: r.objectsTotal,
    bytes_done: r.bytesDone,
    bytes_total: r.bytesTotal,
    started_at: new Date(r.startedAt).toISOString(),
    finished_at: r.finishedAt === null ? null : new Date(r.finishedAt).toISOString(),
    report: r.report,
    error: r.error,
  };
}

/** Progress is written to the jobs table this often while a job runs. */
const PERSIST_EVERY_MS = 1000;
/** With a shared index: how often a queued job asks again for its repository's lease, and dead nodes' jobs are looked for. */
const LEASE_RETRY_MS = 1000;
const RECENT_SHOWN = 20;

/**
 * Runs maintenance jobs independently of the request that started them. Jobs of one repository run
 * one after another (across the cluster: only while this node holds the repository's lease), so
 * retain, dedupe and compress never work on the same references at once; an identical request joins
 * the queued or running job. A row left `running` by a dead process becomes `interrupted`; every job
 * is safe to interrupt at any instant and to run twice.
 */
export class JobRunner {
  readonly #repo: JobIndex;
  readonly #log: (msg: string, fields: object) => void;
  readonly #node: NodeIdentity | null;
  readonly #live = new Map<string, Job>();
  readonly #tails = new Map<string, Promise<void>>();
  readonly #abort = new AbortController();
  #reaper: NodeJS.Timeout | null = null;

  private constructor(repo: JobIndex, node: NodeIdentity | null, log: (msg: string, fields: object) => void) {
    this.#repo = repo;
    this.#node = node;
    this.#log = log;
  }

  /**
   * One node (`node` null): every row left running was cut short by the previous process. A cluster
   * node: rows of dead nodes, now and every LEASE_RETRY_MS.
   */
  static async open(repo: JobIndex, node: NodeIdentity | null, log: (msg: string, fields: object) => void): Promise<JobRunner> {
    const runner = new JobRunner(repo, node, log);
    // At start on a full disk the index may not take this write: the rows stay `running` meanwhile.
    const n = await runner.#record(() => repo.markInterrupted(node === null ? null : node.liveSince()));
    if (n !== undefined && n > 0) log('maintenance jobs interrupted by a stopped node; run them again to finish', { level: 'warn', count: n });
    if (node !== null) {
      runner.#reaper = setInterval(() => {
        void runner.#record(() => repo.markInterrupted(node.liveSince())).then((k) => {
          if (k !== undefined && k > 0) log('maintenance jobs of a node that stopped answering marked interrupted', { level: 'warn', count: k });
        });
      }, LEASE_RETRY_MS * 10);
      runner.#reaper.unref();
    }
    return runner;
  }

  async start(kind: JobKind, repo: string, dryRun: boolean, body: JobBody): Promise<Job> {
    for (const j of this.#live.values()) {
      if (j.kind === kind && j.repo === repo && j.dryRun === dryRun && (j.state === 'queued' || j.state === 'running') && !j.cancelled.signal.aborted) return j;
    }
    const job = new Job(kind, repo, dryRun);
    // Known at once, so a request arriving while the row is written joins this job.
    this.#live.set(job.id, job);
    try {
      // Recorded before it is queued: if the index cannot take the row (a full disk), no job is left
      // queued in memory for the next request of the same kind to join and wait on forever.
      await this.#repo.insert(job.id, kind, repo, dryRun, job.startedAt, this.#node?.id ?? '');
    } catch (e) {
      this.#live.delete(job.id);
      job.state = 'failed';
      job.finishedAt = Date.now();
      job.settle(null, e); // anyone who joined meanwhile gets the same error
      throw e;
    }
    const previous = this.#tails.get(repo) ?? Promise.resolve();
    const run = previous.then(() => this.#run(job, body));
    this.#tails.set(repo, run);
    void run.finally(() => {
      if (this.#tails.get(repo) === run) this.#tails.delete(repo);
    });
    return job;
  }

  /** With a shared index: waits until this node holds the repository's lease (false: stopped or cancelled first). */
  async #lease(job: Job): Promise<boolean> {
    const node = this.#node;
    if (node === null) return true;
    const signal = AbortSignal.any([this.#abort.signal, job.cancelled.signal]);
    for (;;) {
      if (signal.aborted) return false;
      if (await this.#repo.acquireLease(job.repo, node.id, node.liveSince())) return true;
      // Held by a live node: nothing announces its release across nodes, so ask again shortly.
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, LEASE_RETRY_MS);
        signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
      });
    }
  }

  async #run(job: Job, body: JobBody): Promise<void> {
    // Progress rows are only for the dashboard: one the index cannot take is skipped, not fatal.
    const persist = (): void => void this.#record(() => this.#repo.progress(job.id, job.progress));
    const shutdown = this.#abort.signal;
    let timer: NodeJS.Timeout | null = null;
    let leased = false;
    try {
      if (shutdown.aborted) throw lfsError('LFS_ERR_SHUTTING_DOWN');
      if (job.finishedAt !== null) return; // cancelled while queued
      leased = await this.#lease(job);
      if (shutdown.aborted) throw lfsError('LFS_ERR_SHUTTING_DOWN');
      if (!leased) {
        if (job.finishedAt === null) await this.#end(job, 'cancelled', null, null);
        return;
      }
      job.state = 'running';
      this.#log('job started', { job: job.id, kind: job.kind, repo: job.repo, dry_run: job.dryRun });
      timer = setInterval(persist, PERSIST_EVERY_MS);
      timer.unref();
      const report = await body({ signal: AbortSignal.any([shutdown, job.cancelled.signal]), progress: job.progress });
      // Stopped part-way by a shutdown: not a result; running the job again finishes it.
      if (shutdown.aborted) throw lfsError('LFS_ERR_SHUTTING_DOWN', 'The server stopped during this job; run it again to finish');
      // Cancelled: the work done so far stands (each object is complete on its own).
      await this.#end(job, job.cancelled.signal.aborted ? 'cancelled' : 'done', report, null);
    } catch (e) {
      if (shutdown.aborted) {
        // Shutdown: the work done so far is kept (each step is complete on its own); a rerun finishes.
        await this.#end(job, 'interrupted', null, lfsError('LFS_ERR_SHUTTING_DOWN', 'The server stopped during this job; run it again to finish'));
      } else {
        this.#log('maintenance job failed', { level: 'error', job: job.id, kind: job.kind, repo: job.repo, err: String((e as Error)?.stack ?? e) });
        await this.#end(job, 'failed', null, e);
      }
    } finally {
      if (timer !== null) clearInterval(timer);
      if (leased && this.#node !== null) await this.#record(() => this.#repo.releaseLease(job.repo, this.#node!.id));
      const finished = [...this.#live.values()].filter((j) => j.finishedAt !== null);
      for (const old of finished.slice(0, Math.max(0, finished.length - RECENT_SHOWN))) this.#live.delete(old.id);
    }
  }

  async #end(job: Job, state: 'done' | 'cancelled' | 'failed' | 'interrupted', report: JobReport | null, error: unknown): Promise<void> {
    job.state = state;
    job.report = report;
    job.error = error;
    job.finishedAt = Date.now();
    const text = state === 'interrupted' ? 'the server stopped during this job' : error === null ? null : errorText(error);
    await this.#record(() => this.#repo.finish(job.id, state, report, text, job.progress));
    // A cancelled job is an answer, not an error: those waiting get what it did before it stopped.
    job.settle(error === null ? (report ?? {}) : null, error);
    const outcome = jobOutcome(job.kind, state, report);
    // The event that ends every job, with what it came to (problems or a failure are worth a look: warn).
    this.#log('job finished', {
      level: outcome === 'problems' || outcome === 'failed' ? 'warn' : 'info',
      job: job.id,
      kind: job.kind,
      repo: job.repo,
      outcome,
      seconds: Math.round((Date.now() - job.startedAt) / 100) / 10,
      objects: job.progress.objectsDone,
      bytes: job.progress.bytesDone,
    });
  }

  /** A running job stops before its next object; its view says `running` until then. Null: unknown. */
  async cancel(repo: string, id: string): Promise<JobDetail | null> {
    const live = this.#live.get(id);
    if (live === undefined || live.repo !== repo) return this.find(repo, id);
    if (live.finishedAt === null && !live.cancelled.signal.aborted) {
      this.#log('maintenance job cancelled', { job: live.id, kind: live.kind, repo: live.repo, state: live.state });
      live.cancelled.abort();
      // Not started yet: it ends now rather than when the jobs ahead of it in the queue are done.
      if (live.state === 'queued') await this.#end(live, 'cancelled', null, null);
    }
    return live.view();
  }

  /** Never throws: the outcome must still reach its waiters and the next job must still run. */
  async #record<T>(write: () => Promise<T>): Promise<T | undefined> {
    try {
      return await write();
    } catch (e) {
      this.#log('maintenance job row not written', { err: String(e) });
      return undefined;
    }
  }

  /** A job of `repo` by id (live or from the table); null for another repository's job. */
  async find(repo: string, id: string): Promise<JobDetail | null> {
    const live = this.#live.get(id);
    if (live !== undefined) return live.repo === repo ? live.view() : null;
    const row = await this.#repo.get(id);
    return row !== null && row.repo === repo ? rowView(row) : null;
  }

  async jobsOf(repo: string): Promise<JobDetail[]> {
    const live = [...this.#live.values()].filter((j) => j.repo === repo && j.finishedAt === null).reverse(); // newest first
    const rows = (await this.#repo.recentOf(repo, RECENT_SHOWN)).filter((r) => !live.some((j) => j.id === r.id));
    return [...live.map((j) => j.view()), ...rows.map((r) => this.#live.get(r.id)?.view() ?? rowView(r))].sort((a, b) => b.started_at.localeCompare(a.started_at));
  }

  async jobs(): Promise<{ running: JobView[]; recent: JobView[] }> {
    const running = [...this.#live.values()].filter((j) => j.state === 'queued' || j.state === 'running').map((j) => j.view());
    const recent = (await this.#repo.recent(RECENT_SHOWN + running.length))
      .filter((r) => !running.some((j) => j.id === r.id))
      .slice(0, RECENT_SHOWN)
      .map((r) => this.#live.get(r.id)?.view() ?? rowView(r));
    return { running, recent };
  }

  /** Shutdown: every job is told to stop at its next object, and this waits for them. */
  async close(): Promise<void> {
    if (this.#reaper !== null) clearInterval(this.#reaper);
    this.#abort.abort();
    await Promise.allSettled([...this.#tails.values()]);
  }
}

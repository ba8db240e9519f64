import { randomBytes } from 'node:crypto';
import type { JobRow, JobsRepo } from '../../db/jobs-repo.js';
import { isLfsError, lfsError } from '../../errors/errors.js';
import type { JobView } from '../stats-service.js';

export type JobKind = 'retain' | 'dedupe' | 'compress' | 'audit';

/** Objects and bytes done out of the total, as a job goes; totals are null until counted. */
export interface Progress {
  objectsDone: number;
  objectsTotal: number | null;
  bytesDone: number;
  bytesTotal: number | null;
}

/** What a job body gets: a signal aborted at shutdown, and the progress it updates in place. */
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
  readonly id = randomBytes(12).toString('base64url');
  readonly kind: JobKind;
  readonly repo: string;
  readonly dryRun: boolean;
  readonly startedAt = Date.now();
  readonly progress: Progress = { objectsDone: 0, objectsTotal: null, bytesDone: 0, bytesTotal: null };
  state: 'queued' | 'running' | 'done' | 'failed' | 'interrupted' = 'queued';
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
const RECENT_SHOWN = 20;

/**
 * Runs maintenance jobs in this process, independently of the request that started them (a client
 * that hangs up does not stop its job). Jobs of one repository run one after another, so retain,
 * dedupe and compress never work on the same references at once; a second request for a job
 * already queued or running (same kind, repository and dry-run flag) joins it instead of starting
 * another. Every job is a row in the jobs table; a row left `running` by a killed process is marked
 * `interrupted` at the next start, and running the job again finishes the work (each job is
 * written to be safe to interrupt at any instant and to run twice).
 */
export class JobRunner {
  readonly #repo: JobsRepo;
  readonly #log: (msg: string, fields: object) => void;
  readonly #live = new Map<string, Job>();
  /** Tail of each repository's queue. */
  readonly #tails = new Map<string, Promise<void>>();
  readonly #abort = new AbortController();

  constructor(repo: JobsRepo, log: (msg: string, fields: object) => void) {
    this.#repo = repo;
    this.#log = log;
    // At start on a full disk the index may not take this write: the rows stay `running` meanwhile.
    let n = 0;
    this.#record(() => (n = repo.markInterrupted()));
    if (n > 0) log('maintenance jobs interrupted by the previous stop; run them again to finish', { count: n });
  }

  start(kind: JobKind, repo: string, dryRun: boolean, body: JobBody): Job {
    for (const j of this.#live.values()) {
      if (j.kind === kind && j.repo === repo && j.dryRun === dryRun && (j.state === 'queued' || j.state === 'running')) return j;
    }
    const job = new Job(kind, repo, dryRun);
    // Recorded first: if the index cannot take the row (a full disk), no job is left queued in
    // memory for the next request of the same kind to join and wait on forever.
    this.#repo.insert(job.id, kind, repo, dryRun, job.startedAt);
    this.#live.set(job.id, job);
    const previous = this.#tails.get(repo) ?? Promise.resolve();
    const run = previous.then(() => this.#run(job, body));
    this.#tails.set(repo, run);
    void run.finally(() => {
      if (this.#tails.get(repo) === run) this.#tails.delete(repo);
    });
    return job;
  }

  async #run(job: Job, body: JobBody): Promise<void> {
    // Progress rows are only for the dashboard: one the index cannot take is skipped, not fatal.
    const persist = (): void => this.#record(() => this.#repo.progress(job.id, job.progress));
    let timer: NodeJS.Timeout | null = null;
    try {
      if (this.#abort.signal.aborted) throw lfsError('LFS_ERR_SHUTTING_DOWN');
      job.state = 'running';
      timer = setInterval(persist, PERSIST_EVERY_MS);
      timer.unref();
      const report = await body({ signal: this.#abort.signal, progress: job.progress });
      // Stopped part-way by a shutdown: not a result; running the job again finishes it.
      if (this.#abort.signal.aborted) throw lfsError('LFS_ERR_SHUTTING_DOWN', 'The server stopped during this job; run it again to finish');
      job.report = report;
      job.state = 'done';
      job.finishedAt = Date.now();
      this.#record(() => this.#repo.finish(job.id, 'done', report, null, job.progress));
      job.settle(report, null);
    } catch (e) {
      job.error = e;
      job.finishedAt = Date.now();
      if (this.#abort.signal.aborted) {
        // Shutdown: the work done so far is kept (each step is complete on its own); a rerun finishes.
        job.state = 'interrupted';
        this.#record(() => this.#repo.finish(job.id, 'interrupted', null, 'the server stopped during this job', job.progress));
      } else {
        job.state = 'failed';
        this.#log('maintenance job failed', { job: job.id, kind: job.kind, repo: job.repo, err: String((e as Error)?.stack ?? e) });
        this.#record(() => this.#repo.finish(job.id, 'failed', null, errorText(e), job.progress));
      }
      job.settle(null, this.#abort.signal.aborted ? lfsError('LFS_ERR_SHUTTING_DOWN', 'The server stopped during this job; run it again to finish') : e);
    } finally {
      if (timer !== null) clearInterval(timer);
      // Keep a few finished jobs in memory for the dashboard; the table keeps the rest.
      const finished = [...this.#live.values()].filter((j) => j.finishedAt !== null);
      for (const old of finished.slice(0, Math.max(0, finished.length - RECENT_SHOWN))) this.#live.delete(old.id);
    }
  }

  /**
   * Writes a job's row; a failure (a full disk) is logged, never thrown: the job's outcome must
   * still reach whoever waits for it, and the repository's next job must still run.
   */
  #record(write: () => void): void {
    try {
      write();
    } catch (e) {
      this.#log('maintenance job row not written', { err: String(e) });
    }
  }

  /** A job of `repo` by id (live or from the table); null for another repository's job. */
  find(repo: string, id: string): JobDetail | null {
    const live = this.#live.get(id);
    if (live !== undefined) return live.repo === repo ? live.view() : null;
    const row = this.#repo.get(id);
    return row !== null && row.repo === repo ? rowView(row) : null;
  }

  /** For the dashboard: jobs queued or running, and the most recent finished ones. */
  jobs(): { running: JobView[]; recent: JobView[] } {
    const running = [...this.#live.values()].filter((j) => j.state === 'queued' || j.state === 'running').map((j) => j.view());
    const recent = this.#repo
      .recent(RECENT_SHOWN + running.length)
      .filter((r) => !running.some((j) => j.id === r.id))
      .slice(0, RECENT_SHOWN)
      .map((r) => this.#live.get(r.id)?.view() ?? rowView(r));
    return { running, recent };
  }

  /** Shutdown: every job is told to stop at its next object, and this waits for them. */
  async close(): Promise<void> {
    this.#abort.abort();
    await Promise.allSettled([...this.#tails.values()]);
  }
}

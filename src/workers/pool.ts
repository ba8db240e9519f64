import type { Piscina } from 'piscina';
import { movable, type CompressResult, type CompressTask, type DecodeResult, type DecodeTask, type FrameCodec } from '../format/frame-codec.js';
import { lazyModule } from '../util/lazy-module.js';

// Loaded with a pool's first task: a server at rest, or one with compression off, runs none.
const piscina = lazyModule<typeof import('piscina')>('piscina');

/** How long threads stay after the last task: each holds an isolate's memory, so a server at rest runs none. */
export const THREAD_IDLE_MS = 10_000;

/** Figures of the Piscina instances a pool has retired, so its counters never go back. */
interface Retired {
  completed: number;
  busySeconds: number;
}

/**
 * The worker-thread pool for CPU-heavy work, so the HTTP thread only moves bytes. All threads exit
 * once no task ran for `idleMs` (Piscina's own idle timeout could leave one running for good). A
 * task whose worker dies fails; Piscina replaces the worker.
 */
export class WorkerPool implements FrameCodec {
  readonly #threads: number;
  readonly #filename: URL;
  readonly #idleMs: number;
  #pool: Piscina | null = null;
  #inFlight = 0;
  #idleTimer: NodeJS.Timeout | null = null;
  readonly #retired: Retired = { completed: 0, busySeconds: 0 };
  readonly #listeners: ((event: 'start' | 'exit', threads: number) => void)[] = [];

  constructor(threads: number, filename: URL = new URL('./frame.worker.js', import.meta.url), idleMs = THREAD_IDLE_MS) {
    this.#threads = threads;
    this.#filename = filename;
    this.#idleMs = idleMs;
  }

  /**
   * Calls `listener` after a thread starts, and once all have exited after an idle spell, with the
   * threads left running (tests wait on this event rather than on a clock).
   */
  onThreads(listener: (event: 'start' | 'exit', threads: number) => void): void {
    this.#listeners.push(listener);
  }

  #tell(event: 'start' | 'exit', threads: number): void {
    for (const listener of this.#listeners) listener(event, threads);
  }

  #open(): Piscina {
    if (this.#pool !== null) return this.#pool;
    const pool = new (piscina().Piscina)({
      filename: this.#filename.href,
      minThreads: 0,
      maxThreads: this.#threads,
      idleTimeout: Infinity, // let go as a whole (#rest)
      // No queue cap here: each transfer keeps at most two frames in flight, which bounds the queue.
    });
    pool.on('workerCreate', () => this.#tell('start', pool.threads.length));
    this.#pool = pool;
    return pool;
  }

  /** After the last task of a burst: the threads go once idleMs pass with no new task. */
  #rest(): void {
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = null;
      const pool = this.#pool;
      if (this.#inFlight > 0 || pool === null) return;
      this.#pool = null;
      this.#retire(pool);
      void pool.destroy().then(() => this.#tell('exit', 0), () => this.#tell('exit', 0));
    }, this.#idleMs);
    this.#idleTimer.unref(); // never keeps a process alive
  }

  #retire(pool: Piscina): void {
    this.#retired.completed += pool.completed;
    this.#retired.busySeconds += busySecondsOf(pool);
  }

  async run<T>(name: string, task: object, transfer: ArrayBuffer[] = []): Promise<T> {
    const pool = this.#open();
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    this.#inFlight++;
    try {
      return (await pool.run(task, { name, transferList: transfer })) as T;
    } finally {
      if (--this.#inFlight === 0) this.#rest();
    }
  }

  compress(task: CompressTask): Promise<CompressResult> {
    return this.run('compressFrame', task, movable(task.input, task.out));
  }

  decode(task: DecodeTask): Promise<DecodeResult> {
    return this.run('decodeFrame', task, [task.stored, task.out]);
  }

  /** `threads`: the pool's size (the busy figures' denominator); `started`: how many run now. */
  get stats(): { threads: number; started: number; queued: number; running: number; utilization: number; completed: number; busySeconds: number } {
    const pool = this.#pool;
    const threads = this.#threads;
    return {
      threads,
      started: pool?.threads.length ?? 0,
      queued: pool?.queueSize ?? 0,
      running: pool === null ? 0 : Math.round(pool.utilization * threads),
      utilization: pool?.utilization ?? 0,
      completed: this.#retired.completed + (pool?.completed ?? 0),
      busySeconds: this.#retired.busySeconds + (pool === null ? 0 : busySecondsOf(pool)),
    };
  }

  async close(): Promise<void> {
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    const pool = this.#pool;
    this.#pool = null;
    if (pool !== null) {
      this.#retire(pool);
      await pool.destroy();
    }
  }
}

/**
 * Piscina's utilization is task run time over (lifetime × maxThreads): this undoes it into the total
 * task run time, a counter whose rate shows the recent load (metrics).
 */
function busySecondsOf(pool: Piscina): number {
  return (pool.utilization * pool.duration * pool.options.maxThreads) / 1000;
}

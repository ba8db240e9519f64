import { Piscina } from 'piscina';
import type { CompressResult, CompressTask, DecodeResult, DecodeTask, FrameCodec } from '../format/frame-codec.js';
import { movable } from './frame.worker.js';

/**
 * How long a worker thread may sit idle before it exits. Each thread costs ~10 MiB of resident memory
 * (its own V8 isolate and heap, zstd's contexts), so a server at rest runs none; starting one costs
 * ~30 ms, paid once per burst of work, never per task.
 */
export const THREAD_IDLE_MS = 10_000;

/**
 * The worker-thread pool for CPU-heavy work (frame compression and checks, maintenance jobs), so the
 * HTTP thread only moves bytes. Threads start with the first task that finds none free (up to
 * `threads`) and exit after THREAD_IDLE_MS without work. A task whose worker dies (a crash in native
 * code, an exit) fails with an error; Piscina replaces the worker and the server carries on.
 */
export class WorkerPool implements FrameCodec {
  readonly #pool: Piscina;

  constructor(threads: number, filename: URL = new URL('./frame.worker.js', import.meta.url), idleMs = THREAD_IDLE_MS) {
    this.#pool = new Piscina({
      filename: filename.href,
      minThreads: 0,
      maxThreads: threads,
      idleTimeout: idleMs,
      // No queue cap here: each transfer keeps at most two frames in flight, which bounds the queue.
    });
  }

  /**
   * Calls `listener` after a thread starts or is let go, with the threads left running (tests wait on
   * this event rather than on a clock).
   */
  onThreads(listener: (event: 'start' | 'exit', threads: number) => void): void {
    // Piscina tells before it forgets the thread: count once it has.
    const tell = (event: 'start' | 'exit') => () => queueMicrotask(() => listener(event, this.#pool.threads.length));
    this.#pool.on('workerCreate', tell('start'));
    this.#pool.on('workerDestroy', tell('exit'));
  }

  /** Runs a named task of the worker file; buffers in `transfer` are moved, not copied. */
  run<T>(name: string, task: object, transfer: ArrayBuffer[] = []): Promise<T> {
    return this.#pool.run(task, { name, transferList: transfer }) as Promise<T>;
  }

  compress(task: CompressTask): Promise<CompressResult> {
    return this.run('compressFrame', task, movable(task.input, task.out));
  }

  decode(task: DecodeTask): Promise<DecodeResult> {
    return this.run('decodeFrame', task, [task.stored, task.out]);
  }

  /**
   * Load figures for the dashboard and metrics. `threads` is the pool's size (the denominator of the
   * busy figures), `started` how many of them run now (none at rest).
   */
  get stats(): { threads: number; started: number; queued: number; running: number; utilization: number; completed: number; busySeconds: number } {
    const threads = this.#pool.options.maxThreads;
    return {
      threads,
      started: this.#pool.threads.length,
      queued: this.#pool.queueSize,
      running: Math.round(this.#pool.utilization * threads),
      utilization: this.#pool.utilization,
      completed: this.#pool.completed,
      // Piscina's utilization is task run time over (lifetime × maxThreads): this undoes it into the
      // total task run time, a counter whose rate shows the recent load (metrics).
      busySeconds: (this.#pool.utilization * this.#pool.duration * this.#pool.options.maxThreads) / 1000,
    };
  }

  close(): Promise<void> {
    return this.#pool.destroy();
  }
}

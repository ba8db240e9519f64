import { Piscina } from 'piscina';
import type { CompressResult, CompressTask, DecodeResult, DecodeTask, FrameCodec } from '../format/frame-codec.js';
import { movable } from './frame.worker.js';

/**
 * The worker-thread pool for CPU-heavy work (frame compression and checks, maintenance jobs), so the
 * HTTP thread only moves bytes. A task whose worker dies (a crash in native code, an exit) fails
 * with an error; Piscina replaces the worker and the server carries on.
 */
export class WorkerPool implements FrameCodec {
  readonly #pool: Piscina;

  constructor(threads: number, filename: URL = new URL('./frame.worker.js', import.meta.url)) {
    this.#pool = new Piscina({
      filename: filename.href,
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: 60_000,
      // No queue cap here: each transfer keeps at most two frames in flight, which bounds the queue.
    });
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

  /** Load figures for the dashboard and metrics. */
  get stats(): { threads: number; queued: number; running: number; utilization: number; completed: number; busySeconds: number } {
    return {
      threads: this.#pool.threads.length,
      queued: this.#pool.queueSize,
      running: this.#pool.threads.length > 0 ? Math.round(this.#pool.utilization * this.#pool.threads.length) : 0,
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

import type { CompressResult, CompressTask, DecodeResult, DecodeTask, FrameCodec } from '../../format/frame-codec.js';
import { WorkerPool } from '../../workers/pool.js';
import type { ByteMeter } from '../../workers/byte-meter.js';
import type { HashFileResult } from '../../workers/maintenance.worker.js';

const WORKER_FILE = new URL('../../workers/maintenance.worker.js', import.meta.url);

/**
 * The maintenance jobs' whole-file tasks, on a pool whose threads run at a lower OS priority
 * (maintenance.worker.ts): every core when idle, yielded at once to requests and upload frame work.
 * Also the compress job's `FrameCodec`; frame tasks are not gated (the compress layer bounds its own).
 */
export class WorkerTasks implements FrameCodec {
  readonly #pool: WorkerPool;
  readonly #permits: number;
  #busy = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(threads: number) {
    this.#pool = new WorkerPool(threads, WORKER_FILE);
    this.#permits = Math.max(1, threads);
  }

  get stats(): WorkerPool['stats'] {
    return this.#pool.stats;
  }

  close(): Promise<void> {
    return this.#pool.close();
  }

  /** How many whole-file tasks may run at once: a job runs that many objects in parallel. */
  get parallelism(): number {
    return this.#permits;
  }

  async #gated<T>(run: () => Promise<T>): Promise<T> {
    if (this.#busy >= this.#permits) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    else this.#busy++;
    try {
      return await run();
    } finally {
      const next = this.#waiting.shift();
      if (next !== undefined) next(); // the permit passes straight on
      else this.#busy--;
    }
  }

  /** Hashes a plain file as it is (maintenance.worker.ts); `meter`, if given, counts the bytes as they go. */
  hash(path: string, meter?: ByteMeter): Promise<HashFileResult> {
    return this.#gated(() => this.#pool.run<HashFileResult>('hashFile', { path, meter: meter?.buffer }));
  }

  compress(task: CompressTask): Promise<CompressResult> {
    return this.#pool.compress(task);
  }

  decode(task: DecodeTask): Promise<DecodeResult> {
    return this.#pool.decode(task);
  }
}

/** Runs `fn` over `items`, at most `limit` at once; stops starting new ones once `signal` aborts (then returns false). */
export async function forEachLimited<T>(items: readonly T[], limit: number, signal: AbortSignal, fn: (item: T) => Promise<void>): Promise<boolean> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length && !signal.aborted) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return next >= items.length && !signal.aborted;
}

/** forEachLimited over items that arrive one by one (a folder walk); the iterator is closed at the end. */
export async function forEachLimitedAsync<T>(items: AsyncIterable<T>, limit: number, signal: AbortSignal, fn: (item: T) => Promise<void>): Promise<boolean> {
  const it = items[Symbol.asyncIterator]();
  let ended = false;
  const lane = async (): Promise<void> => {
    while (!ended && !signal.aborted) {
      const next = await it.next();
      if (next.done === true) ended = true;
      else await fn(next.value);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, limit) }, lane));
  } finally {
    if (!ended) await it.return?.();
  }
  return ended && !signal.aborted;
}

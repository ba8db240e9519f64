/**
 * Bytes a worker has read of the object it is working on, shared with the thread that started the
 * task: the worker stores its running count after every chunk, the job's progress reads it at any
 * time, so a job on one large object moves as it reads instead of jumping when the object ends.
 * One 64-bit slot in a SharedArrayBuffer, written and read with Atomics (no torn reads).
 */
export class ByteMeter {
  /** Passed in the task; structured clone shares it with the worker instead of copying it. */
  readonly buffer = new SharedArrayBuffer(8);
  readonly #view = new BigInt64Array(this.buffer);

  /** Bytes the worker has reported so far. */
  read(): number {
    return Number(Atomics.load(this.#view, 0));
  }
}

/** Worker side: records that `bytes` of the object have been read (a running total, not a delta). */
export function reportBytes(buffer: SharedArrayBuffer | undefined, bytes: number): void {
  if (buffer !== undefined) Atomics.store(new BigInt64Array(buffer), 0, BigInt(bytes));
}

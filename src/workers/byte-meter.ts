/**
 * Bytes a worker has read of its object, so a job's progress moves during one large object. One
 * 64-bit slot in a SharedArrayBuffer, written and read with Atomics (no torn reads).
 */
export class ByteMeter {
  /** Passed in the task; structured clone shares it with the worker instead of copying it. */
  readonly buffer = new SharedArrayBuffer(8);
  readonly #view = new BigInt64Array(this.buffer);

  read(): number {
    return Number(Atomics.load(this.#view, 0));
  }
}

/** Worker side: records that `bytes` of the object have been read (a running total, not a delta). */
export function reportBytes(buffer: SharedArrayBuffer | undefined, bytes: number): void {
  if (buffer !== undefined) Atomics.store(new BigInt64Array(buffer), 0, BigInt(bytes));
}

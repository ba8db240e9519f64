import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import { smallBuffers } from './buffer-pool.js';
import { IncomingCheck } from './incoming-check.js';
import type { ObjectWriter, PutResult } from './types.js';

/** Objects up to this size, with a known size, go to the journal instead of a file of their own. */
export const SMALL_OBJECT_MAX = 1 << 20;

/**
 * Collects a small upload in memory (its size is known and at most SMALL_OBJECT_MAX), hashing as it
 * arrives; on finish, the verified bytes are handed to `store`, which journals them durably.
 */
export class SmallWriter implements ObjectWriter {
  readonly #check: IncomingCheck;
  /** From the pool; null once given back (finished or aborted). */
  #buf: Buffer | null;
  readonly #store: (data: Buffer) => Promise<PutResult>;
  #failed: unknown = null;

  constructor(oid: Oid, size: number, store: (data: Buffer) => Promise<PutResult>) {
    this.#check = new IncomingCheck(oid, size);
    this.#buf = smallBuffers.take(size);
    this.#store = store;
  }

  write(chunk: Uint8Array): boolean {
    if (this.#failed !== null) throw this.#failed;
    const at = this.#check.count;
    try {
      this.#check.take(chunk);
    } catch (e) {
      throw (this.#failed = e);
    }
    this.#buf!.set(chunk, at);
    return true;
  }

  onDrain(): void {
    // Never asks the caller to wait: the whole object fits in its buffer.
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    await this.#check.verify();
    try {
      return await this.#store(this.#buf!);
    } finally {
      this.#release(); // the journal copied the bytes into its record
    }
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#release();
  }

  #release(): void {
    if (this.#buf !== null) smallBuffers.give(this.#buf);
    this.#buf = null;
  }
}

import { createHash, type Hash } from 'node:crypto';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { ObjectWriter, PutResult } from './types.js';

/** Objects up to this size, with a known size, go to the journal instead of a file of their own. */
export const SMALL_OBJECT_MAX = 1 << 20;

/**
 * Collects a small upload in memory (its size is known and at most SMALL_OBJECT_MAX), hashing as it
 * arrives; on finish, the verified bytes are handed to `store`, which journals them durably.
 */
export class SmallWriter implements ObjectWriter {
  readonly #oid: Oid;
  readonly #buf: Buffer;
  readonly #store: (data: Buffer) => Promise<PutResult>;
  readonly #hash: Hash = createHash('sha256');
  #count = 0;
  #failed: unknown = null;

  constructor(oid: Oid, size: number, store: (data: Buffer) => Promise<PutResult>) {
    this.#oid = oid;
    this.#buf = Buffer.allocUnsafe(size);
    this.#store = store;
  }

  write(chunk: Uint8Array): boolean {
    if (this.#failed !== null) throw this.#failed;
    if (this.#count + chunk.byteLength > this.#buf.length) {
      throw (this.#failed = lfsError('LFS_ERR_SIZE_MISMATCH', `Object is larger than the announced ${this.#buf.length} bytes`));
    }
    this.#hash.update(chunk);
    this.#buf.set(chunk, this.#count);
    this.#count += chunk.byteLength;
    return true;
  }

  onDrain(): void {
    // Never asks the caller to wait: the whole object fits in its buffer.
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    if (this.#count !== this.#buf.length) {
      throw lfsError('LFS_ERR_SIZE_MISMATCH', `Received ${this.#count} bytes; the announced size is ${this.#buf.length}`);
    }
    const digest = this.#hash.digest('hex');
    if (digest !== this.#oid) throw lfsError('LFS_ERR_DIGEST_MISMATCH', `Content hashes to ${digest}, not to the oid ${this.#oid}`);
    return this.#store(this.#buf);
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
  }
}

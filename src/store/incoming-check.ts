import { createHash, type Hash } from 'node:crypto';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';

/**
 * The checks every writer makes on an incoming object (design.md rule 2): bytes are counted and
 * sha256-hashed as they arrive, the first byte past the announced size is refused at once, and
 * `verify()` fails unless the count and the digest match before anything is committed.
 */
export class IncomingCheck {
  readonly #oid: Oid;
  readonly #expected: number | null;
  readonly #hash: Hash = createHash('sha256');
  #count = 0;

  constructor(oid: Oid, expected: number | null) {
    this.#oid = oid;
    this.#expected = expected;
  }

  /** Bytes taken so far. */
  get count(): number {
    return this.#count;
  }

  /** Counts and hashes a chunk; throws LFS_ERR_SIZE_MISMATCH past the announced size. */
  take(chunk: Uint8Array): void {
    this.#count += chunk.byteLength;
    if (this.#expected !== null && this.#count > this.#expected) {
      throw lfsError('LFS_ERR_SIZE_MISMATCH', `Object is larger than the announced ${this.#expected} bytes`);
    }
    this.#hash.update(chunk);
  }

  /** Throws unless exactly the announced size arrived and it hashes to the oid. Call once. */
  verify(): void {
    if (this.#expected !== null && this.#count !== this.#expected) {
      throw lfsError('LFS_ERR_SIZE_MISMATCH', `Received ${this.#count} bytes; the announced size is ${this.#expected}`);
    }
    const digest = this.#hash.digest('hex');
    if (digest !== this.#oid) throw lfsError('LFS_ERR_DIGEST_MISMATCH', `Content hashes to ${digest}, not to the oid ${this.#oid}`);
  }
}

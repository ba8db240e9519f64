import { createHash, type Hash } from 'node:crypto';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { StreamHasher } from '../format/frame-codec.js';

/**
 * The checks every writer makes on an incoming object (docs/architecture.md, "Conventions"): bytes are counted and
 * sha256-hashed as they arrive, the first byte past the announced size is refused at once, and
 * `verify()` fails unless the count and the digest match before anything is committed.
 * With a StreamHasher, the hasher hashes the writer's gathered buffers instead (hashGathered).
 */
export class IncomingCheck {
  readonly #oid: Oid;
  readonly #expected: number | null;
  readonly #hash: Hash | null;
  readonly #stream: StreamHasher | null;
  readonly #known: string | null;
  #count = 0;

  /** `known`: the bytes' digest, already computed by this process (nothing is hashed again). */
  constructor(oid: Oid, expected: number | null, stream: StreamHasher | null = null, known: string | null = null) {
    this.#oid = oid;
    this.#expected = expected;
    this.#stream = known === null ? stream : null;
    this.#known = known;
    this.#hash = known === null && stream === null ? createHash('sha256') : null;
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
    this.#hash?.update(chunk);
  }

  /**
   * With a StreamHasher: hashes the next gathered buffer (bytes in arrival order, shared memory);
   * `done` runs once the buffer may be reused. Without one the bytes were hashed by take().
   */
  hashGathered(view: Uint8Array, done: () => void): void {
    if (this.#stream === null) done();
    else this.#stream.update(view, done);
  }

  /** Rejects unless exactly the announced size arrived and it hashes to the oid. Call once. */
  async verify(): Promise<void> {
    if (this.#expected !== null && this.#count !== this.#expected) {
      this.discard();
      throw lfsError('LFS_ERR_SIZE_MISMATCH', `Received ${this.#count} bytes; the announced size is ${this.#expected}`);
    }
    const digest = this.#known ?? (this.#stream === null ? this.#hash!.digest('hex') : await this.#stream.digest());
    if (digest !== this.#oid) throw lfsError('LFS_ERR_DIGEST_MISMATCH', `Content hashes to ${digest}, not to the oid ${this.#oid}`);
  }

  /** The upload ends without verify (aborted, failed): lets the hasher forget it. */
  discard(): void {
    this.#stream?.drop();
  }
}

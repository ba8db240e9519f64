import { createHash, type Hash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';

/**
 * Pass-through that counts and sha256-hashes the bytes, and fails the stream before its end is
 * accepted when the size or digest does not match (rudolfs VerifyStream). An over-long body fails at
 * the first byte past the expected size, so a client cannot stream gigabytes past its announcement.
 */
export class VerifyStream extends Transform {
  readonly #oid: Oid;
  readonly #expectedSize: number | null;
  readonly #hash: Hash = createHash('sha256');
  #count = 0;

  constructor(oid: Oid, expectedSize: number | null) {
    super({ highWaterMark: 1 << 20 });
    this.#oid = oid;
    this.#expectedSize = expectedSize;
  }

  get count(): number {
    return this.#count;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.#count += chunk.length;
    if (this.#expectedSize !== null && this.#count > this.#expectedSize) {
      cb(lfsError('LFS_ERR_SIZE_MISMATCH', `Object is larger than the announced ${this.#expectedSize} bytes`));
      return;
    }
    this.#hash.update(chunk);
    cb(null, chunk);
  }

  override _flush(cb: TransformCallback): void {
    if (this.#expectedSize !== null && this.#count !== this.#expectedSize) {
      cb(lfsError('LFS_ERR_SIZE_MISMATCH', `Received ${this.#count} bytes; the announced size is ${this.#expectedSize}`));
      return;
    }
    const digest = this.#hash.digest('hex');
    if (digest !== this.#oid) {
      cb(lfsError('LFS_ERR_DIGEST_MISMATCH', `Content hashes to ${digest}, not to the oid ${this.#oid}`));
      return;
    }
    cb();
  }
}

import { lfsError } from '../errors/errors.js';
import { smallBuffers } from './buffer-pool.js';
import type { ObjectWriter, PutResult } from './types.js';

/**
 * Collects a small object of known size whole and hands it to `store` in one piece: one released
 * block is kept as it is, anything else copied into a pooled buffer. A size mismatch is refused
 * (LFS_ERR_SIZE_MISMATCH).
 */
export class WholeObjectWriter<P extends PutResult = PutResult> implements ObjectWriter {
  readonly #size: number;
  readonly #store: (data: Uint8Array) => Promise<P>;
  /** The whole object, once it arrived as one released block. */
  #held: { data: Uint8Array; release: () => void } | null = null;
  #buf: Buffer | null = null;
  #fill = 0;
  #failed: unknown = null;

  constructor(size: number, store: (data: Uint8Array) => Promise<P>) {
    this.#size = size;
    this.#store = store;
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    if (this.#failed !== null || this.#fill + chunk.byteLength > this.#size) {
      release?.();
      throw (this.#failed ??= lfsError('LFS_ERR_SIZE_MISMATCH', `Object is larger than the announced ${this.#size} bytes`));
    }
    if (release !== undefined && this.#fill === 0 && chunk.byteLength === this.#size) {
      this.#held = { data: chunk, release };
      this.#fill = chunk.byteLength;
      return true;
    }
    this.#buf ??= smallBuffers.take(this.#size);
    if (this.#held !== null) this.#unhold();
    this.#buf.fill(chunk, this.#fill, this.#fill + chunk.byteLength); // one memcpy, even from shared memory (see SegmentLog.append)
    this.#fill += chunk.byteLength;
    release?.();
    return true;
  }

  /** Copies a held block into the buffer (a later chunk followed it: only a caller not ours does that). */
  #unhold(): void {
    const held = this.#held!;
    this.#held = null;
    this.#buf!.fill(held.data, 0, held.data.byteLength);
    held.release();
  }

  onDrain(): void {
    // Never asks the caller to wait: the whole object fits in memory.
  }

  async finish(): Promise<P> {
    if (this.#failed !== null) throw this.#failed;
    if (this.#fill !== this.#size) throw lfsError('LFS_ERR_SIZE_MISMATCH', `Received ${this.#fill} bytes; the announced size is ${this.#size}`);
    try {
      return await this.#store(this.#held?.data ?? this.#buf?.subarray(0, this.#size) ?? new Uint8Array(0));
    } finally {
      this.#release(); // `store` is done with the bytes (the journal copied them into its record)
    }
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#release();
  }

  #release(): void {
    this.#held?.release();
    this.#held = null;
    if (this.#buf !== null) smallBuffers.give(this.#buf);
    this.#buf = null;
  }
}

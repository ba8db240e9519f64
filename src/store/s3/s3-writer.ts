import type { ObjectWriter, PutResult } from '../types.js';
import { MAX_PARTS_IN_FLIGHT, type S3Upload } from './s3-upload.js';

/**
 * The S3 store's backend writer: bytes exactly as given, through an S3Upload that makes the key
 * visible only in finish(). Chunks are copied into part buffers (`release` is called at once); write()
 * returns false while MAX_PARTS_IN_FLIGHT parts upload.
 */
export class S3Writer implements ObjectWriter {
  readonly #upload: S3Upload;
  #drain: (() => void) | null = null;
  #waiting = false;
  #failed: unknown = null;

  constructor(upload: S3Upload) {
    this.#upload = upload;
    this.#upload.onSettle(() => {
      if (this.#waiting && (this.#upload.inFlight < MAX_PARTS_IN_FLIGHT || this.#upload.failed !== null)) {
        this.#waiting = false;
        this.#drain?.();
      }
    });
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    try {
      if (this.#failed !== null) throw this.#failed;
      this.#upload.push(chunk);
    } catch (e) {
      throw (this.#failed = e);
    } finally {
      // push() copied what it keeps (or failed): the caller's chunk is free either way.
      release?.();
    }
    if (this.#upload.inFlight >= MAX_PARTS_IN_FLIGHT) {
      this.#waiting = true;
      return false;
    }
    return true;
  }

  onDrain(listener: () => void): void {
    this.#drain = listener;
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    const r = await this.#upload.complete();
    return { size: r.storedSize, storedSize: r.storedSize, created: r.created };
  }

  async abort(): Promise<void> {
    await this.#upload.abort();
  }
}

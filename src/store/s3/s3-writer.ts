import type { Oid } from '../../protocol/oid.js';
import { IncomingCheck } from '../incoming-check.js';
import type { ObjectWriter, PutResult } from '../types.js';
import type { S3Client } from './s3-client.js';
import { MAX_PARTS_IN_FLIGHT, S3Upload } from './s3-upload.js';

/**
 * Writes an upload to its final key exactly as it arrives: every byte is counted and sha256-hashed in
 * line (IncomingCheck), and the S3Upload makes the key visible only after verify() passed.
 */
export class S3Writer implements ObjectWriter {
  readonly #check: IncomingCheck;
  readonly #upload: S3Upload;
  #drain: (() => void) | null = null;
  #waiting = false;
  #failed: unknown = null;

  constructor(client: S3Client, key: string, oid: Oid, expected: number | null) {
    this.#check = new IncomingCheck(oid, expected);
    this.#upload = new S3Upload(client, key, expected);
    this.#upload.onSettle(() => {
      if (this.#waiting && (this.#upload.inFlight < MAX_PARTS_IN_FLIGHT || this.#upload.failed !== null)) {
        this.#waiting = false;
        this.#drain?.();
      }
    });
  }

  write(chunk: Uint8Array): boolean {
    if (this.#failed !== null) throw this.#failed;
    try {
      this.#check.take(chunk);
      this.#upload.push(chunk);
    } catch (e) {
      throw (this.#failed = e);
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
    await this.#check.verify();
    const r = await this.#upload.complete();
    return { size: this.#check.count, storedSize: r.storedSize, created: r.created };
  }

  async abort(): Promise<void> {
    await this.#upload.abort();
  }
}

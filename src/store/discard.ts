import type { Oid } from '../protocol/oid.js';
import type { BlobReader, BlobStat, BlobStore, ObjectWriter, PutResult, StoredObject, WriterOptions } from './types.js';

/** A backend that stores nothing, its writers only counting bytes: the compress job's dry run measures what a real backend would be handed. */
export class DiscardBlobStore implements BlobStore {
  /** The block size of the backend it stands in for, so the layers above behave as they would there. */
  readonly blockSize: number;
  readonly presigner = null;
  readonly legacy = null;
  readonly journal = null;

  constructor(blockSize: number) {
    this.blockSize = blockSize;
  }

  async createWriter(_oid: Oid, _options: WriterOptions): Promise<ObjectWriter> {
    return new CountingWriter();
  }

  async open(_oid: Oid): Promise<BlobReader | null> {
    return null;
  }

  async stat(_oid: Oid): Promise<BlobStat | null> {
    return null;
  }

  async delete(_oid: Oid): Promise<boolean> {
    return false;
  }

  async *list(): AsyncIterable<StoredObject> {
    // holds nothing
  }

  async quarantine(_oid: Oid): Promise<boolean> {
    return false;
  }

  async sweepStaging(_maxAgeMs: number): Promise<number> {
    return 0;
  }

  async checkWritable(): Promise<void> {
    // always "writable": nothing is kept
  }
}

/** Counts what it is given; `storedSize` is that count. */
class CountingWriter implements ObjectWriter {
  #bytes = 0;

  write(chunk: Uint8Array, release?: () => void): boolean {
    this.#bytes += chunk.byteLength;
    // Released after this call returns, as a backend that wrote the chunk out would.
    if (release !== undefined) queueMicrotask(release);
    return true;
  }

  onDrain(_listener: () => void): void {
    // never full
  }

  async finish(): Promise<PutResult> {
    return { size: this.#bytes, storedSize: this.#bytes, created: true };
  }

  async abort(): Promise<void> {
    // nothing staged
  }
}

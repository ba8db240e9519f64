import type { Oid } from '../../protocol/oid.js';
import type { BlobReader, BlobStat, BlobStore, InLineObject, ObjectWriter, Presigner, StoredObject, UploadJournal, WriterOptions } from '../types.js';

/**
 * A layer that passes every operation to the store it wraps; a real layer extends it and overrides
 * only what it changes (rudolfs' storage wrappers), so what a layer does is all its file says.
 */
export abstract class ForwardingBlobStore implements BlobStore {
  protected readonly inner: BlobStore;

  constructor(inner: BlobStore) {
    this.inner = inner;
  }

  get blockSize(): number {
    return this.inner.blockSize;
  }

  get presigner(): Presigner | null {
    return this.inner.presigner;
  }

  get legacy(): BlobStore['legacy'] {
    return this.inner.legacy;
  }

  /**
   * Not forwarded: the journal's writers take the upload's bytes, so a layer above it that works on
   * writes must wrap them (verify does) or hide it, never let uploads pass it by.
   */
  get journal(): UploadJournal | null {
    return null;
  }

  createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    return this.inner.createWriter(oid, options);
  }

  open(oid: Oid): Promise<BlobReader | null> {
    return this.inner.open(oid);
  }

  openInLine(oid: Oid): InLineObject | undefined {
    return this.inner.openInLine?.(oid);
  }

  stat(oid: Oid): Promise<BlobStat | null> {
    return this.inner.stat(oid);
  }

  delete(oid: Oid): Promise<boolean> {
    return this.inner.delete(oid);
  }

  list(): AsyncIterable<StoredObject> {
    return this.inner.list();
  }

  quarantine(oid: Oid): Promise<boolean> {
    return this.inner.quarantine(oid);
  }

  sweepStaging(maxAgeMs: number): Promise<number> {
    return this.inner.sweepStaging(maxAgeMs);
  }

  checkWritable(): Promise<void> {
    return this.inner.checkWritable();
  }
}

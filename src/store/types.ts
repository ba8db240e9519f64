import type { Readable } from 'node:stream';
import type { Oid } from '../protocol/oid.js';

/** What a successful put stored. */
export interface PutResult {
  readonly size: number; // logical bytes, as hashed
  readonly storedSize: number; // bytes on disk
  /** False when the store already held these bytes and the new copy was dropped. */
  readonly created: boolean;
}

export interface PutOptions {
  /** Size the client announced (Content-Length or the batch); null when unknown (chunked without a hint). */
  readonly expectedSize: number | null;
  /** Aborting tears the write down and removes the staging file. */
  readonly signal: AbortSignal;
}

/** An opened object: reads never observe a later replacement or deletion of the file. */
export interface BlobReader {
  readonly size: number;
  /** Bytes [start, end] inclusive, with bounded read-ahead. */
  stream(start: number, end: number): Readable;
  close(): Promise<void>;
}

/**
 * Content-addressed blob storage. Implementations verify size and sha256 while the bytes flow and
 * never let unverified bytes reach the final name (design.md rule 2).
 */
export interface BlobStore {
  put(oid: Oid, body: Readable, options: PutOptions): Promise<PutResult>;
  open(oid: Oid): Promise<BlobReader | null>;
  /** Removes staging files older than maxAgeMs (litter of a crash); returns how many. */
  sweepStaging(maxAgeMs: number): Promise<number>;
  /** Throws unless the store can be written now (readiness probe). */
  checkWritable(): Promise<void>;
}

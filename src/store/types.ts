import type { Oid } from '../protocol/oid.js';

/** What a successful put stored. */
export interface PutResult {
  readonly size: number; // logical bytes, as hashed
  readonly storedSize: number; // bytes on disk
  /** False when the store already held these bytes and the new copy was dropped. */
  readonly created: boolean;
}

export interface WriterOptions {
  /** The repository the upload is for ("org/repo"): its reference is journaled with the object. */
  readonly repo: string;
  /** Size the client announced (Content-Length or the batch); null when unknown (chunked without a hint). */
  readonly expectedSize: number | null;
}

/**
 * Push-based writer of one incoming object. The HTTP layer feeds it the body as it arrives; the
 * writer hashes every byte in line, checks the size as it goes, and never lets unverified bytes reach
 * the object's final name (design.md rule 2).
 */
export interface ObjectWriter {
  /**
   * Takes a chunk (copied before returning, so a uWS buffer may be passed). Returns false when the
   * caller should stop sending until `onDrain` fires. Throws an LfsError on a size overrun.
   */
  write(chunk: Uint8Array): boolean;
  /** Called once each time the writer can take more after write() returned false. */
  onDrain(listener: () => void): void;
  /** The whole body was given: flush, verify size and digest, fsync, rename, and return. */
  finish(): Promise<PutResult>;
  /** Give up: the staging file is removed. Safe to call at any time, more than once. */
  abort(): Promise<void>;
}

/**
 * Pull-based chunks of one read. A returned chunk stays valid until the next call to next() or
 * close(); the source reads ahead a bounded amount, so memory per download is fixed.
 */
export interface ChunkSource {
  next(): Promise<Uint8Array | null>;
  close(): Promise<void>;
}

/** An opened object: reads never observe a later replacement or deletion of the file. */
export interface BlobReader {
  /** Logical size. */
  readonly size: number;
  /** Bytes the object takes on disk. */
  readonly storedSize: number;
  /** True for the framed (zstd) form, false for an object stored as it arrived. */
  readonly framed: boolean;
  /** Bytes [start, end] inclusive. */
  read(start: number, end: number): ChunkSource;
  close(): Promise<void>;
}

/**
 * Content-addressed blob storage. Implementations verify size and sha256 while the bytes flow and
 * never let unverified bytes reach the final name.
 */
export interface BlobStore {
  createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter>;
  open(oid: Oid): Promise<BlobReader | null>;
  /** Removes staging files untouched for maxAgeMs (litter of a crash); returns how many. */
  sweepStaging(maxAgeMs: number): Promise<number>;
  /** Throws unless the store can be written now (readiness probe). */
  checkWritable(): Promise<void>;
}

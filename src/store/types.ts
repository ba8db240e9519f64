import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { StrayReason } from './foreign-layout.js';

/**
 * The storage contract (docs/storage-contract.md). Every backend (disk, S3) implements
 * `BlobStore`; every feature on top of one (verify, compress, journal, faulty) is a `BlobStore` that
 * wraps another, and `compose.ts` writes the order down once. What only some stacks can do is a
 * capability (`presigner`, `legacy`, `journal`), null where absent. Services depend on these
 * interfaces only.
 * test/conformance/blob-store.suite.ts is what an implementation must pass.
 */

/** What a finished write stored. */
export interface PutResult {
  /** Logical bytes, as hashed. */
  readonly size: number;
  /** Bytes the object takes in the backend (a framed object's frames, index and trailer). */
  readonly storedSize: number;
  /** False when the store already held these bytes and the new copy was dropped. */
  readonly created: boolean;
}

export interface WriterOptions {
  /** Size the client announced (Content-Length or the batch); null when unknown (chunked without a hint). */
  readonly expectedSize: number | null;
  /**
   * Overwrite the oid's stored copy instead of keeping it (maintenance re-encoding an object it has
   * just verified). Default: a write of an oid the store holds keeps the stored copy (`created` false).
   */
  readonly replace?: boolean;
  /**
   * The bytes are the framed format (the compress layer writes them): a backend that keeps object
   * metadata records it, so its readers can tell plain objects without probing for a trailer.
   */
  readonly framed?: boolean;
  /**
   * The bytes' sha256, computed by this process as they arrived (a resumable upload): the verify
   * layer still counts them and checks this against the oid, without hashing them again.
   */
  readonly sha256?: string;
}

/**
 * Push-based writer of one object. Nothing written becomes visible under the oid before `finish`
 * resolves, and nothing is left behind by `abort` or a failed `finish`.
 */
export interface ObjectWriter {
  /**
   * Takes the next chunk. Without `release`, the writer copies what it keeps before returning (a uWS
   * chunk is reused once its callback returns). With `release`, the caller leaves the chunk unchanged
   * until the writer calls `release` (exactly once, also on failure or abort): a layer hands its
   * gathered blocks down without a copy. Returns false when the caller should stop writing until
   * `onDrain` fires. Throws an LfsError on a size overrun (verify layer) or a write error; `release`
   * is called all the same.
   */
  write(chunk: Uint8Array, release?: () => void): boolean;
  /** Called each time the writer can take more after write() returned false. */
  onDrain(listener: () => void): void;
  /** The whole object was given: verify (where the stack verifies), make durable and visible, return. */
  finish(): Promise<PutResult>;
  /** Give up: whatever was staged is removed. Safe to call at any time, more than once. */
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

/** An opened object: its reads never observe a later replacement or deletion of the oid. */
export interface BlobReader {
  /** Logical size. */
  readonly size: number;
  /** Bytes the object takes in the backend. */
  readonly storedSize: number;
  /**
   * True for the framed (zstd) form, false for an object stored as it arrived. A backend that does
   * not know (disk keeps no metadata) says null, and the compress layer probes for a trailer.
   */
  readonly framed: boolean | null;
  /** Bytes [start, end] inclusive. */
  read(start: number, end: number): ChunkSource;
  /**
   * Fills `into` with the bytes at `position` (all of them, or throws): a frame's stored bytes read
   * straight into the buffer that decodes it.
   */
  readAt(into: Uint8Array, position: number): Promise<void>;
  close(): Promise<void>;
}

/** An object as the store holds it. */
export interface BlobStat {
  readonly size: number;
  readonly storedSize: number;
  /** As BlobReader.framed. */
  readonly framed: boolean | null;
}

/** An oid the backend holds, as list() yields it. */
export interface StoredObject {
  readonly oid: Oid;
  readonly storedSize: number;
}

/**
 * Content-addressed blob storage: one copy per oid, shared by every repository (which repository may
 * see which oid is the index's business, not the store's).
 */
/**
 * Where partial resumable uploads keep their bytes when several nodes share them (a bucket): parts
 * of one upload, numbered from 0, under a name built from a hash (never from client text).
 */
export interface PartStore {
  put(name: string, part: number, bytes: Uint8Array): Promise<void>;
  /** The part's bytes as they come. */
  read(name: string, part: number): Promise<AsyncIterable<Uint8Array>>;
  /** Removes every part of `name`. */
  removeAll(name: string): Promise<void>;
}

export interface BlobStore {
  /**
   * Writes cost least in blocks of this many bytes from aligned shared memory (format: a compress
   * layer's frame; a disk backend's O_DIRECT unit). The verify layer gathers into blocks of it.
   */
  readonly blockSize: number;
  createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter>;
  /** Null when the store does not hold the oid. */
  open(oid: Oid): Promise<BlobReader | null>;
  /**
   * Optional: a small object's whole bytes at once, without waiting, where the store can read them on
   * the calling thread (a local file in the page cache). Undefined whenever it cannot (absent, large,
   * framed, journaled, remote, a read error): `open` then decides. A download of a small object
   * then needs no turn of the event loop (docs/performance.md, "A small GET in line").
   */
  openInLine?(oid: Oid): InLineObject | undefined;
  stat(oid: Oid): Promise<BlobStat | null>;
  /** Removes the oid's bytes (readers already open keep reading them); false when there were none. */
  delete(oid: Oid): Promise<boolean>;
  /** Every oid the store holds, in no particular order, without holding them all in memory. */
  list(): AsyncIterable<StoredObject>;
  /**
   * Moves the oid's bytes out of the keyspace, kept for inspection (`quarantine/`), so the next write
   * of the oid stores fresh bytes instead of finding bad ones "already stored". False when there were none.
   */
  quarantine(oid: Oid): Promise<boolean>;
  /** Removes staging litter untouched for maxAgeMs (a crash's, an abandoned upload's); returns how many. */
  sweepStaging(maxAgeMs: number): Promise<number>;
  /** Throws unless a write of a new object could succeed now (readiness probe: what a PUT needs). */
  checkWritable(): Promise<void>;
  /** Capability: presigned links straight to the backend (S3). */
  readonly presigner: Presigner | null;
  /** Capability: the legacy per-repository layout that dedupe folds in (disk). */
  readonly legacy: LegacyLayout | null;
  /** Capability: uploads whose reference the store journals with their bytes (the journal layer: disk, one node). */
  readonly journal: UploadJournal | null;
}

/**
 * Capability of a stack with the small-object journal (store/journal/): an upload written through
 * it has its reference (repository, oid, size) durable in the journal when `finish` resolves, with
 * the object, so the caller may acknowledge it before the index commits that reference: replay at
 * start restores a reference the index lost. Otherwise a writer as `createWriter` gives.
 */
export interface UploadJournal {
  createWriter(repo: string, oid: Oid, options: WriterOptions): Promise<JournaledWriter>;
}

/** A writer of an upload whose reference the journal records (UploadJournal). */
export interface JournaledWriter extends ObjectWriter {
  finish(): Promise<JournaledPut>;
}

/** What a journaled upload stored. */
export interface JournaledPut extends PutResult {
  /**
   * Called when the index failed to take the reference after the upload was acknowledged: the
   * journal keeps it and hands it to the index again before it lets go of its own copy. Null when
   * the journal's file system is short of room, so the index's commit could meet a full disk: the
   * caller then commits the reference before it acknowledges.
   */
  readonly keepReference: (() => void) | null;
}

/** An object's whole bytes in a pooled buffer, held until `release` (once). */
export interface InLineObject {
  readonly bytes: Buffer;
  release(): void;
}

/** A presigned link: the URL and the headers the client must send with it. */
export interface SignedLink {
  readonly href: string;
  readonly header: Readonly<Record<string, string>>;
  /** Seconds the link lives: as asked, or less when the backend's credentials expire sooner. */
  readonly expiresIn: number;
}

/** Capability of a backend clients can reach directly (presigned links). */
export interface Presigner {
  /** Objects of this size or more are compressed on the way in (so never presigned); null when off. */
  readonly compressFrom: number | null;
  /** Largest object one presigned PUT may carry; larger ones go through the server. */
  readonly maxPresignedPut: number;
  /** Longest lifetime a link may have, in seconds (SigV4: 7 days). */
  readonly maxExpiresIn: number;
  presignDownload(oid: Oid, expiresIn: number): SignedLink;
  /** A presigned PUT to this repository's landing key (never the shared keyspace). */
  presignUpload(repoKey: string, oid: Oid, expiresIn: number): SignedLink;
  /**
   * Moves a landing object into the shared keyspace once its size and sha256 are confirmed; wrong
   * bytes are deleted and never visible. Throws 404 when nothing was uploaded, 422 when they differ.
   */
  promoteIncoming(repoKey: string, oid: Oid, size: number): Promise<PutResult>;
}

/** A repository's legacy folder as scanLegacy finds it. */
export interface LegacyScan {
  readonly objects: readonly { readonly oid: Oid; readonly path: string; readonly size: number; readonly mtimeMs: number }[];
  /** Files that are not objects of the layout, up to the number asked for (set-aside files never listed). */
  readonly strays: readonly { readonly rel: string; readonly reason: StrayReason }[];
  readonly strayCounts: Partial<Record<StrayReason, number>>;
}

/**
 * Capability of the disk backend: the legacy per-repository layout `repos/{org}/{repo}/ab/cd/<oid>`
 * (docs/maintenance.md), served until dedupe folds it into the shared store, and verified files taken in
 * without a copy (dedupe, import).
 */
export interface LegacyLayout {
  /** Size of a repository's legacy file, or null; synchronous for the batch answer. */
  legacySizeSync(repo: RepoName, oid: Oid): number | null;
  /** Opens a legacy file as a plain object; null when absent. */
  openLegacy(repo: RepoName, oid: Oid): Promise<BlobReader | null>;
  scanLegacy(repo: RepoName, listed: number): Promise<LegacyScan>;
  /** Renames a legacy file aside (`<oid>.<suffix>`): neither served nor folded, kept for inspection. */
  setAsideLegacy(repo: RepoName, oid: Oid, suffix: 'refused' | 'corrupt'): Promise<void>;
  /** A folder beside the objects (same file system) where jobs stage files for adoptFile. */
  maintenanceStaging(): Promise<string>;
  /**
   * Takes a file whose bytes were verified to be `oid` into the shared store under its oid without a
   * copy (a hard link), durably. False when the store already holds the oid.
   */
  adoptFile(oid: Oid, path: string): Promise<boolean>;
  /** Removes a file the jobs own (a folded legacy file, a staged copy) and makes the removal durable. */
  purge(path: string): Promise<void>;
}

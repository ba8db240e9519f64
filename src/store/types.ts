import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { StrayReason } from './foreign-layout.js';

/**
 * The storage contract (docs/storage-contract.md): backends implement `BlobStore`, layers wrap one,
 * `compose.ts` fixes the order. What only some stacks can do is a capability, null where absent.
 * test/conformance/blob-store.suite.ts is what an implementation must pass.
 */

/** What a finished write stored. */
export interface PutResult {
  readonly size: number;
  /** Bytes the object takes in the backend (a framed object's frames, index and trailer). */
  readonly storedSize: number;
  /** False when the store already held these bytes and the new copy was dropped. */
  readonly created: boolean;
}

export interface WriterOptions {
  /** Size the client announced (Content-Length or the batch); null when unknown (chunked without a hint). */
  readonly expectedSize: number | null;
  /** Overwrite the oid's stored copy (maintenance re-encoding a verified object); default: keep it. */
  readonly replace?: boolean;
  /** The bytes are framed: a backend with object metadata records it so readers need not probe. */
  readonly framed?: boolean;
  /** The bytes' sha256, computed as they arrived (resumable upload): verify checks it, no rehash. */
  readonly sha256?: string;
}

/**
 * Push-based writer of one object. Nothing written becomes visible under the oid before `finish`
 * resolves, and nothing is left behind by `abort` or a failed `finish`.
 */
export interface ObjectWriter {
  /**
   * Without `release`, the writer copies what it keeps before returning (uWS reuses the chunk). With
   * it, the caller leaves the chunk unchanged until `release` is called (exactly once, also on
   * failure). False: wait for `onDrain`. Throws an LfsError on a size overrun or a write error.
   */
  write(chunk: Uint8Array, release?: () => void): boolean;
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
  readonly size: number;
  readonly storedSize: number;
  /** Null when the backend keeps no metadata (disk): the compress layer then probes for a trailer. */
  readonly framed: boolean | null;
  /** Bytes [start, end] inclusive. */
  read(start: number, end: number): ChunkSource;
  /** Fills `into` with the bytes at `position` (all of them, or throws). */
  readAt(into: Uint8Array, position: number): Promise<void>;
  close(): Promise<void>;
}

/** An object as the store holds it. */
export interface BlobStat {
  readonly size: number;
  readonly storedSize: number;
  readonly framed: boolean | null;
}

export interface StoredObject {
  readonly oid: Oid;
  readonly storedSize: number;
}

/**
 * Where partial resumable uploads keep their bytes when several nodes share them (a bucket): parts
 * of one upload, numbered from 0, under a name built from a hash (never from client text).
 */
export interface PartStore {
  put(name: string, part: number, bytes: Uint8Array): Promise<void>;
  read(name: string, part: number): Promise<AsyncIterable<Uint8Array>>;
  removeAll(name: string): Promise<void>;
}

/**
 * Content-addressed blob storage: one copy per oid, shared by every repository (which repository may
 * see which oid is the index's business, not the store's).
 */
export interface BlobStore {
  /** Writes cost least in blocks of this size (a frame; O_DIRECT's unit): verify gathers into them. */
  readonly blockSize: number;
  createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter>;
  /** Null when the store does not hold the oid. */
  open(oid: Oid): Promise<BlobReader | null>;
  /**
   * A small object's whole bytes read on the calling thread (a local file), so its download needs no
   * turn of the event loop. Undefined whenever it cannot (absent, large, framed, remote, an error).
   */
  openInLine?(oid: Oid): InLineObject | undefined;
  stat(oid: Oid): Promise<BlobStat | null>;
  /** Removes the oid's bytes (readers already open keep reading them); false when there were none. */
  delete(oid: Oid): Promise<boolean>;
  /** Every oid the store holds, in no particular order, without holding them all in memory. */
  list(): AsyncIterable<StoredObject>;
  /** Moves the bytes aside (`quarantine/`) so the next write stores fresh ones; false when none. */
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
 * The small-object journal (store/journal/): when `finish` resolves the upload's reference is durable
 * with its bytes, so the caller may answer before the index commits it; replay restores a lost one.
 */
export interface UploadJournal {
  createWriter(repo: string, oid: Oid, options: WriterOptions): Promise<JournaledWriter>;
}

export interface JournaledWriter extends ObjectWriter {
  finish(): Promise<JournaledPut>;
}

export interface JournaledPut extends PutResult {
  /**
   * Called when the index failed to take an acknowledged reference: the journal keeps it and hands it
   * over again. Null when the disk is short of room: the caller then commits before it answers.
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
  /** Moves a confirmed landing object into the shared keyspace; 404 when absent, 422 when wrong. */
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
  openLegacy(repo: RepoName, oid: Oid): Promise<BlobReader | null>;
  scanLegacy(repo: RepoName, listed: number): Promise<LegacyScan>;
  /** Renames a legacy file aside (`<oid>.<suffix>`): neither served nor folded, kept for inspection. */
  setAsideLegacy(repo: RepoName, oid: Oid, suffix: 'refused' | 'corrupt'): Promise<void>;
  /** A folder beside the objects (same file system) where jobs stage files for adoptFile. */
  maintenanceStaging(): Promise<string>;
  /** Takes a verified file in under its oid by a hard link, durably; false when already held. */
  adoptFile(oid: Oid, path: string): Promise<boolean>;
  /** Removes a file the jobs own, durably. */
  purge(path: string): Promise<void>;
}

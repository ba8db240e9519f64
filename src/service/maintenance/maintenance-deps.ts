import type { MaintenanceIndex, ObjectIndex, SettingGuard, StatsIndex } from '../../db/index-types.js';
import type { Hasher } from '../../format/frame-codec.js';
import type { Oid } from '../../protocol/oid.js';
import type { BlobStore } from '../../store/types.js';
import type { WorkerTasks } from './worker-tasks.js';

/**
 * Writes of objects and deletions of them, kept apart per oid (TransferService implements it).
 * Retain deletes an object only when no write of its oid is in flight, and a write starts only once
 * a deletion of its oid has settled: the store's delete is asynchronous on every backend, so without
 * the gate an upload finding the bytes "already stored" could record a reference to bytes about to go.
 */
export interface UploadGate {
  /** True while a write of `oid` is in flight, up to and including recording its reference. */
  isUploading(oid: Oid): boolean;
  /**
   * Marks `oid` as being deleted; call it in the same synchronous step as the isUploading check,
   * before the index drops the last reference, and call the returned function once the store's
   * delete has settled (either way).
   */
  markDeleting(oid: Oid): () => void;
  /** Throws 507 when `size` new bytes would take the disk into its reserve (SVC_DISK_RESERVE). */
  admitBytes(size: number | null): void;
  /** Before `oid` is quarantined: downloads batch answers granted (DownloadGrants) ask the index again. */
  withdrawGrants(oid: Oid): void;
  /**
   * Runs `write` (creating a writer, finishing it, recording the reference) as a write of `oid`:
   * counted in flight from this call (on every node, with a shared index), and started only after
   * any deletion of the oid has settled.
   */
  asUpload<T>(oid: Oid, write: (upload: UploadInProgress) => Promise<T>): Promise<T>;
}

/** A write of one oid running under the UploadGate. */
export interface UploadInProgress {
  /**
   * Whether the oid is quarantined, so its bad copy is set aside before the write: asked of the
   * index, or learnt on the way; false on a cluster node outside a retain sweep, where the
   * reference's statement checks instead (and a refused reference sets the copy aside, answering 503).
   */
  quarantined(): Promise<boolean>;
  /**
   * Records `repo`'s reference to the oid. `storedVerified`: the store's copy is the one this write
   * just stored or verified (PutResult.created); false when the store kept a copy it already held.
   * Rejects with a 503 when the index refused it for a reason a retry resolves, and with
   * SettingsChanged when `setting` (the access settings the write was admitted by) is no longer saved so.
   */
  reference(repo: string, size: number, storedSize: number, storedVerified: boolean, setting?: SettingGuard | null): Promise<void>;
}

/** Who this process is to the index: a cluster node, or the one local node of an embedded index. */
export interface NodeIdentity {
  /** Written into deletion intents and job rows. */
  readonly id: string;
  /** Rows of nodes whose heartbeat is at or after this instant are live (see ClusterNode). */
  liveSince(): number;
  /** Runs a retain's deletions: inside a sweep every live node acknowledged (ClusterNode.sweep); at once on one node. */
  sweep<T>(run: () => Promise<T>, signal: AbortSignal): Promise<T>;
}

/** Partial resumable uploads (ResumableUploads): retain removes those of a repository no kept oid needs. */
export interface PartialUploadSweep {
  /**
   * Removes `repoKey`'s partial uploads of oids not in `keep` whose last byte arrived before
   * `before` (ms) and that no request is appending to; returns how many (would go, in a dry run).
   */
  dropUnkept(repoKey: string, keep: ReadonlySet<Oid>, before: number, dryRun: boolean): Promise<number>;
}

/** What every maintenance job works with; built once by MaintenanceService. */
export interface MaintenanceDeps {
  /** The composed stack (verify outermost): jobs read, quarantine and delete through it, as requests do. */
  readonly store: BlobStore;
  /** The raw backend under it: the compress job writes re-encoded objects through compressingStore(backend). */
  readonly backend: BlobStore;
  /** The backend read through the frame reader on the maintenance pool (compose.ts readingStore). */
  readonly reader: BlobStore;
  readonly hasher: Hasher;
  readonly objects: ObjectIndex;
  readonly maint: MaintenanceIndex;
  readonly stats: StatsIndex;
  readonly uploads: UploadGate;
  readonly node: NodeIdentity;
  /** The low-priority pool: whole-file tasks, and the compress job's frame codec. */
  readonly tasks: WorkerTasks;
  /** SVC_GC_GRACE in milliseconds. */
  readonly graceMs: number;
  /** zstd level compress uses (SVC_COMPRESSION's, or 3 when compression of new uploads is off). */
  readonly compressionLevel: number;
  /** Resumable uploads' partial bytes, when this server keeps any. */
  readonly partials: PartialUploadSweep | null;
  readonly log: (msg: string, fields: object) => void;
}

/** Problems listed by oid in a report are capped; the counts are always complete. */
export const LISTED_MAX = 1000;

import type { MaintenanceRepo } from '../../db/jobs-repo.js';
import type { ObjectsRepo } from '../../db/objects-repo.js';
import type { StatsRepo } from '../../db/stats-repo.js';
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
   * Marks `oid` as being deleted; call it in the same synchronous step as the index drops the last
   * reference, and the returned function once the store's delete has settled (either way).
   */
  markDeleting(oid: Oid): () => void;
  /**
   * Runs `write` (creating a writer, finishing it, recording the reference) as a write of `oid`:
   * counted in flight from this call, and started only after any deletion of the oid has settled.
   */
  asUpload<T>(oid: Oid, write: () => Promise<T>): Promise<T>;
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
  readonly objects: ObjectsRepo;
  readonly maint: MaintenanceRepo;
  readonly stats: StatsRepo;
  readonly uploads: UploadGate;
  /** The low-priority pool: whole-file tasks, and the compress job's frame codec. */
  readonly tasks: WorkerTasks;
  /** SVC_GC_GRACE in milliseconds. */
  readonly graceMs: number;
  /** zstd level compress uses (SVC_COMPRESSION's, or 3 when compression of new uploads is off). */
  readonly compressionLevel: number;
  readonly log: (msg: string, fields: object) => void;
}

/** Problems listed by oid in a report are capped; the counts are always complete. */
export const LISTED_MAX = 1000;

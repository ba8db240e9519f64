import type { MaintenanceIndex, ObjectIndex, SettingGuard, StatsIndex } from '../../db/index-types.js';
import type { Hasher } from '../../format/frame-codec.js';
import type { Oid } from '../../protocol/oid.js';
import type { BlobStore } from '../../store/types.js';
import type { WorkerTasks } from './worker-tasks.js';

/**
 * Writes and deletions kept apart per oid (TransferService implements it): without the gate, an
 * upload finding the bytes "already stored" could record a reference to bytes about to go.
 */
export interface UploadGate {
  isUploading(oid: Oid): boolean;
  /** Call in the same synchronous step as isUploading; call the result once the delete settled. */
  markDeleting(oid: Oid): () => void;
  /** Throws 507 when `size` new bytes would take the disk into its reserve (SVC_DISK_RESERVE). */
  admitBytes(size: number | null): void;
  /** Before `oid` is quarantined: downloads batch answers granted (DownloadGrants) ask the index again. */
  withdrawGrants(oid: Oid): void;
  /** In flight from this call on (every node), started once any deletion of the oid settled. */
  asUpload<T>(oid: Oid, write: (upload: UploadInProgress) => Promise<T>): Promise<T>;
}

/** A write of one oid running under the UploadGate. */
export interface UploadInProgress {
  /** False on a cluster node outside a retain sweep: the reference's statement checks instead. */
  quarantined(): Promise<boolean>;
  /**
   * `storedVerified`: PutResult.created. Rejects with a 503 for a refusal a retry resolves, and with
   * SettingsChanged when `setting` is no longer saved so.
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
  readonly graceMs: number;
  /** zstd level compress uses (SVC_COMPRESSION's, or 3 when compression of new uploads is off). */
  readonly compressionLevel: number;
  readonly partials: PartialUploadSweep | null;
  readonly log: (msg: string, fields: object) => void;
}

/** Problems listed by oid in a report are capped; the counts are always complete. */
export const LISTED_MAX = 1000;

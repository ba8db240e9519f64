import type { MaintenanceRepo } from '../../db/jobs-repo.js';
import type { ObjectsRepo } from '../../db/objects-repo.js';
import type { StatsRepo } from '../../db/stats-repo.js';
import type { Oid } from '../../protocol/oid.js';
import type { DiskBlobStore } from '../../store/disk.js';
import type { WorkerTasks } from './worker-tasks.js';

/** What every maintenance job works with; built once by MaintenanceService. */
export interface MaintenanceDeps {
  readonly store: DiskBlobStore;
  readonly objects: ObjectsRepo;
  readonly maint: MaintenanceRepo;
  readonly stats: StatsRepo;
  /** Uploads in flight (TransferService): retain never takes their oids. */
  readonly uploads: { isUploading(oid: Oid): boolean };
  readonly tasks: WorkerTasks;
  /** SVC_GC_GRACE in milliseconds. */
  readonly graceMs: number;
  /** zstd level compress uses (SVC_COMPRESSION's, or 3 when compression of new uploads is off). */
  readonly compressionLevel: number;
  readonly log: (msg: string, fields: object) => void;
}

/** Problems listed by oid in a report are capped; the counts are always complete. */
export const LISTED_MAX = 1000;

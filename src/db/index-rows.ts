import type { Oid } from '../protocol/oid.js';
import { HISTOGRAM_BOUNDS, NO_SWEEPS, QuarantinedCopy, SettingsChanged, SweepMissed, type HistogramBucket, type JobRow, type LockRow, type SessionRow, type StatsSample, type UploadCommit } from './index-types.js';

/**
 * Rows as both indexes store them (the same table and column names: index-types.ts) and their
 * mapping to the interface's types, written once for SQLite and PostgreSQL alike.
 */

/** A `jobs` row (dry_run 0/1, report as JSON text). */
export interface RawJob {
  id: string;
  kind: string;
  repo: string;
  state: string;
  dry_run: number;
  objects_done: number;
  objects_total: number | null;
  bytes_done: number;
  bytes_total: number | null;
  report: string | null;
  error: string | null;
  started_at: number;
  finished_at: number | null;
  node: string;
}

export const toJob = (r: RawJob): JobRow => ({
  id: r.id,
  kind: r.kind,
  repo: r.repo,
  state: r.state as JobRow['state'],
  dryRun: r.dry_run === 1,
  objectsDone: r.objects_done,
  objectsTotal: r.objects_total,
  bytesDone: r.bytes_done,
  bytesTotal: r.bytes_total,
  report: r.report === null ? null : (JSON.parse(r.report) as unknown),
  error: r.error,
  startedAt: r.started_at,
  finishedAt: r.finished_at,
  node: r.node,
});

/** Jobs kept for the progress endpoint and the dashboard; older finished ones are pruned. */
export const KEEP_JOBS = 500;

/** How long a closed retain sweep is kept: a node taken for dead during it still has its references refused if it comes back within this. */
export const SWEEP_KEPT_MS = 24 * 3600_000;

/** A `locks` row. */
export interface RawLock {
  seq: number;
  id: string;
  repo: string;
  path: string;
  ref: string | null;
  owner_id: string;
  owner_name: string;
  locked_at: number;
}

export const toLock = (r: RawLock): LockRow => ({
  seq: r.seq,
  id: r.id,
  repo: r.repo,
  path: r.path,
  ref: r.ref,
  ownerId: r.owner_id,
  ownerName: r.owner_name,
  lockedAt: r.locked_at,
});

/** A `sessions` row. */
export interface RawSession {
  id_hash: string;
  user_id: string;
  user_name: string;
  via: string;
  created_at: number;
  expires_at: number;
}

export const toSession = (r: RawSession): SessionRow => ({
  idHash: r.id_hash,
  userId: r.user_id,
  userName: r.user_name,
  via: r.via,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
});

/** A reference waiting for its group commit, with the promise of the upload that made it. */
export interface PendingReference {
  readonly repo: string;
  readonly oid: Oid;
  readonly size: number;
  readonly storedSize: number;
  readonly commit: UploadCommit | undefined;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

/** What a reference recorded without an UploadCommit is held to: the caller verified the stored bytes, nothing in flight, no sweep to miss. */
export const TRUSTED_COMMIT: UploadCommit = { storedVerified: true, ticket: null, ackedSweep: NO_SWEEPS, setting: null };

/** Per-row outcome of a reference statement. */
export type ReferenceOutcome = 'ok' | 'quarantined' | 'sweep_missed' | 'settings_changed';

/** Settles a pending reference by what its statement decided for it. */
export function settleReference(r: PendingReference, outcome: ReferenceOutcome): void {
  if (outcome === 'ok') r.resolve();
  else if (outcome === 'quarantined') r.reject(new QuarantinedCopy(r.oid));
  else if (outcome === 'settings_changed') r.reject(new SettingsChanged());
  else r.reject(new SweepMissed());
}

/** A `stats_samples` row (rejections as JSON text). */
export interface RawSample {
  at: number;
  repositories: number;
  objects: number;
  logical_bytes: number;
  stored_bytes: number;
  uploads: number;
  upload_bytes: number;
  downloads: number;
  download_bytes: number;
  rejections: string;
}

export const toSample = (r: RawSample): StatsSample => ({
  at: r.at,
  repositories: r.repositories,
  objects: r.objects,
  logicalBytes: r.logical_bytes,
  storedBytes: r.stored_bytes,
  uploads: r.uploads,
  uploadBytes: r.upload_bytes,
  downloads: r.downloads,
  downloadBytes: r.download_bytes,
  rejections: JSON.parse(r.rejections) as Record<string, number>,
});

/** The HISTOGRAM_BOUNDS bucket of `o.size` as a SQL expression both dialects read (constants, never input). */
export const SIZE_BUCKET_SQL = `CASE ${HISTOGRAM_BOUNDS.map((b, i) => `WHEN o.size < ${b} THEN ${i}`).join(' ')} ELSE ${HISTOGRAM_BOUNDS.length} END`;

/** Every bucket from the grouped rows, empty ones included, so plots and JSON always have the same shape. */
export function fullHistogram(rows: readonly { bucket: number; count: number; bytes: number }[]): HistogramBucket[] {
  const byBucket = new Map(rows.map((r) => [r.bucket, r]));
  return Array.from({ length: HISTOGRAM_BOUNDS.length + 1 }, (_, i) => ({
    min: i === 0 ? 0 : HISTOGRAM_BOUNDS[i - 1]!,
    max: i < HISTOGRAM_BOUNDS.length ? HISTOGRAM_BOUNDS[i]! : null,
    count: byBucket.get(i)?.count ?? 0,
    bytes: byBucket.get(i)?.bytes ?? 0,
  }));
}

import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { RepoName } from '../../protocol/repo-name.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { forEachLimited } from './worker-tasks.js';

/** POST /{org}/{repo}/objects/compress's answer. */
export interface CompressReport {
  [key: string]: unknown;
  readonly objects: number;
  /** Re-encoded into the framed form (or, in a dry run, would be). */
  readonly compressed: number;
  readonly already_compressed: number;
  /** Framing would not make them smaller (random data): left as they are. */
  readonly not_smaller: number;
  /** Too small to frame, or served from somewhere other than their own file: left as they are. */
  readonly skipped: number;
  /** Did not hash to their oid or could not be read: left alone (run an audit). */
  readonly refused: number;
  /** Stored bytes of the objects considered, before and after (after = as measured in a dry run). */
  readonly bytes_before: number;
  readonly bytes_after: number;
  readonly saved: number;
  readonly dry_run: boolean;
  readonly complete: boolean;
  readonly refused_objects: readonly string[];
}

/** Same threshold as the store: smaller objects are always stored as they arrive. */
const MIN_FRAMED_SIZE = 4096;

/**
 * Compress: re-encodes the repository's plain objects into the framed zstd form on the worker pool.
 * The worker hashes the plain bytes as it reads them and writes the framed file under the jobs'
 * own staging folder, fsync'd; only when the digest and size match the index does the framed file
 * replace the plain one (an atomic rename, then the directory fsync), and only then is the new
 * stored size recorded. A dry run compresses the same way but writes nothing, so the saving it
 * reports is the real one.
 */
export async function runCompress(deps: MaintenanceDeps, repo: RepoName, dryRun: boolean, ctx: JobContext): Promise<CompressReport> {
  const { store, maint, objects, tasks } = deps;
  const rows = maint.repoObjects(repo.key).filter((r) => !r.quarantined);
  const staging = dryRun ? null : await store.maintenanceStaging();
  ctx.progress.objectsTotal = rows.length;
  ctx.progress.bytesTotal = rows.reduce((n, r) => n + r.size, 0);
  let compressed = 0;
  let already = 0;
  let notSmaller = 0;
  let skipped = 0;
  let refused = 0;
  let before = 0;
  let after = 0;
  const refusedList: string[] = [];

  const complete = await forEachLimited(rows, tasks.parallelism, ctx.signal, async (row) => {
    const meter = ctx.progress.meter();
    try {
      if (row.size < MIN_FRAMED_SIZE || objects.findInRepo(repo.key, row.oid) === null) {
        skipped++;
        return;
      }
      const out = staging === null ? null : join(staging, `${row.oid}.${randomBytes(6).toString('hex')}.framed`);
      const r = await tasks.compress({ path: store.pathOf(row.oid), outPath: out, level: deps.compressionLevel }, meter);
      if (r.outcome === 'missing') {
        skipped++;
        return;
      }
      if (r.outcome === 'already_framed') {
        already++;
        before += r.framedSize;
        after += r.framedSize;
        if (!dryRun && r.framedSize !== row.storedSize) maint.setStoredSize(row.oid, r.framedSize); // a killed run's rename
        return;
      }
      if (r.outcome === 'unreadable' || r.sha256 !== row.oid || r.size !== row.size) {
        refused++;
        if (refusedList.length < LISTED_MAX) refusedList.push(row.oid);
        if (out !== null && r.outcome === 'framed') await store.purge(out);
        return;
      }
      before += r.size;
      after += r.framedSize;
      if (r.outcome === 'not_smaller') {
        notSmaller++;
        return;
      }
      if (out !== null) {
        // Verified and durable: the framed file takes the plain one's name, then the index learns its size.
        await store.replaceObject(row.oid, out);
        maint.setStoredSize(row.oid, r.framedSize);
      }
      compressed++;
    } finally {
      ctx.progress.objectDone(row.size, meter);
    }
  });
  return {
    objects: rows.length,
    compressed,
    already_compressed: already,
    not_smaller: notSmaller,
    skipped,
    refused,
    bytes_before: before,
    bytes_after: after,
    saved: before - after,
    dry_run: dryRun,
    complete,
    refused_objects: refusedList,
  };
}

import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { JobContext } from './job-runner.js';
import type { MaintenanceDeps } from './maintenance-deps.js';

/** POST /{org}/{repo}/objects/retain's answer. */
export interface RetainReport {
  [key: string]: unknown;
  /** References dropped (and legacy files removed); in a dry run, those that would be. */
  readonly swept: number;
  /** Bytes actually freed on disk: only objects no repository references any more. */
  readonly bytes: number;
  /** Not taken because uploaded or referenced within SVC_GC_GRACE. */
  readonly within_grace: number;
  /** Not taken because an upload of the oid is in flight. */
  readonly in_flight: number;
  /** References (and legacy files) kept because the client named them. */
  readonly kept: number;
  readonly dry_run: boolean;
  readonly complete: boolean;
}

/**
 * Retain: the client names every oid the repository still references; the repository's other
 * references are dropped, except what was uploaded or referenced within the grace period and what an
 * upload in flight is writing. An object's bytes are deleted only when no repository references it.
 *
 * Crash-safe order: one index transaction drops the reference and — for the last one — the object
 * row, recording a deletion intent; in the same synchronous step the file is renamed out of
 * `objects/` (so no upload can find it "already stored" in between); then it is unlinked and the
 * intent cleared. A crash leaves at worst an intent, which the next retain finishes.
 */
export async function runRetain(deps: MaintenanceDeps, repo: RepoName, keep: ReadonlySet<Oid>, dryRun: boolean, ctx: JobContext): Promise<RetainReport> {
  const { store, maint, uploads } = deps;
  const cutoff = Date.now() - deps.graceMs;
  const busy = (oid: Oid): boolean => uploads.isUploading(oid) || store.isStaging(oid);
  if (!dryRun) {
    await store.emptyTrash();
    await finishIntents(deps);
  }
  const rows = maint.repoObjects(repo.key);
  const legacy = await store.listLegacy(repo);
  ctx.progress.objectsTotal = rows.length + legacy.length;
  ctx.progress.bytesTotal = rows.reduce((n, r) => n + r.storedSize, 0) + legacy.reduce((n, l) => n + l.size, 0);
  let swept = 0;
  let bytes = 0;
  let withinGrace = 0;
  let inFlight = 0;
  let kept = 0;
  let complete = true;

  for (const row of rows) {
    if (ctx.signal.aborted) {
      complete = false;
      break;
    }
    ctx.progress.objectDone(row.storedSize);
    if (keep.has(row.oid)) {
      kept++;
      continue;
    }
    if (row.referencedAt > cutoff || row.createdAt > cutoff) {
      withinGrace++;
      continue;
    }
    if (busy(row.oid)) {
      inFlight++;
      continue;
    }
    if (dryRun) {
      swept++;
      if (!maint.referencedElsewhere(row.oid, repo.key)) bytes += (await store.objectFileSize(row.oid)) ?? 0;
      continue;
    }
    const size = (await store.objectFileSize(row.oid)) ?? 0;
    // From here to the rename nothing awaits: no upload can interleave (see the class comment).
    if (busy(row.oid)) {
      inFlight++;
      continue;
    }
    const last = maint.dropReference(repo.key, row.oid);
    const detached = last ? store.detachObjectSync(row.oid) : null;
    if (last) store.forgetJournaled(row.oid);
    swept++;
    if (detached !== null) {
      await store.purge(detached);
      bytes += size;
    }
    if (last) maint.deleted(row.oid);
  }

  // The legacy folder: files not named by the client and older than the grace go too.
  for (const l of legacy) {
    if (ctx.signal.aborted) {
      complete = false;
      break;
    }
    ctx.progress.objectDone(l.size);
    if (keep.has(l.oid)) {
      kept++;
      continue;
    }
    if (l.mtimeMs > cutoff) {
      withinGrace++;
      continue;
    }
    swept++;
    bytes += l.size;
    if (!dryRun) await store.purge(l.path);
  }
  return { swept, bytes, within_grace: withinGrace, in_flight: inFlight, kept, dry_run: dryRun, complete };
}

/** Deletion intents a killed retain left: remove the file unless the oid was stored again since. */
async function finishIntents(deps: MaintenanceDeps): Promise<void> {
  const { store, maint, uploads } = deps;
  for (const oid of maint.pendingDeletes()) {
    if (uploads.isUploading(oid) || store.isStaging(oid)) continue; // decided by the next run
    if (!maint.hasObject(oid)) {
      const detached = store.detachObjectSync(oid);
      store.forgetJournaled(oid);
      if (detached !== null) await store.purge(detached);
    }
    maint.deleted(oid);
  }
}

import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { JobContext } from './job-runner.js';
import type { MaintenanceDeps } from './maintenance-deps.js';

/** POST /{org}/{repo}/objects/retain's answer. */
export interface RetainReport {
  [key: string]: unknown;
  /** References dropped (and legacy files removed); in a dry run, those that would be. */
  readonly swept: number;
  /**
   * Each dropped object's stored size in full, whether or not another repository holds it: what the
   * shared store really frees would reveal which oids other repositories hold.
   */
  readonly bytes: number;
  /** Not taken because uploaded or referenced within SVC_GC_GRACE. */
  readonly within_grace: number;
  /** Not taken because an upload of the oid is in flight. */
  readonly in_flight: number;
  /** References (and legacy files) kept because the client named them. */
  readonly kept: number;
  /** Partial resumable uploads removed (of oids not named, untouched within the grace). */
  readonly partial_uploads: number;
  readonly dry_run: boolean;
  readonly complete: boolean;
}

/**
 * Retain: the client names every oid the repository still references; the others are dropped, but
 * for those within the grace period or being uploaded. Bytes go only when no repository refers.
 *
 * Crash-safe order: mark the oid in the deletion gate in the same synchronous step as the in-flight
 * check; one index transaction drops the reference (the last: the object row, and a deletion intent
 * unless another node is writing the oid); the store deletes; the intent is cleared; the gate opens.
 * A crash leaves at worst an intent, which the next retain finishes.
 */
export async function runRetain(deps: MaintenanceDeps, repo: RepoName, keep: ReadonlySet<Oid>, dryRun: boolean, ctx: JobContext): Promise<RetainReport> {
  // Deletes run inside a sweep (NodeIndex in index-types.ts): with several nodes, only once every
  // live node has recorded its uploads in flight for this retain to see.
  return dryRun ? sweepRepo(deps, repo, keep, true, ctx) : deps.node.sweep(() => sweepRepo(deps, repo, keep, false, ctx), ctx.signal);
}

async function sweepRepo(deps: MaintenanceDeps, repo: RepoName, keep: ReadonlySet<Oid>, dryRun: boolean, ctx: JobContext): Promise<RetainReport> {
  const { store, maint, uploads } = deps;
  const cutoff = Date.now() - deps.graceMs;
  if (!dryRun) await finishIntents(deps);
  const rows = await maint.repoObjects(repo.key);
  const legacy = store.legacy === null ? [] : (await store.legacy.scanLegacy(repo, 0)).objects;
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
    if (uploads.isUploading(row.oid)) {
      inFlight++;
      continue;
    }
    if (dryRun) {
      swept++;
      bytes += row.storedSize;
      continue;
    }
    // From the check to markDeleting nothing awaits: no upload here can start in between.
    if (uploads.isUploading(row.oid)) {
      inFlight++;
      continue;
    }
    const open = uploads.markDeleting(row.oid);
    try {
      const outcome = await maint.dropReference(repo.key, row.oid, deps.node.liveSince(), deps.node.id);
      swept++;
      bytes += row.storedSize;
      if (outcome === 'in_flight') inFlight++;
      if (outcome === 'delete') await deleteBytes(deps, row.oid);
    } finally {
      open();
    }
  }

  // The legacy folder (disk): files not named by the client and older than the grace go too.
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
    if (!dryRun) await store.legacy!.purge(l.path);
  }
  // Partial uploads are bytes no reference holds: those of oids not named go as unreferenced ones do.
  const partials = complete && deps.partials !== null ? await deps.partials.dropUnkept(repo.key, keep, cutoff, dryRun) : 0;
  return { swept, bytes, within_grace: withinGrace, in_flight: inFlight, kept, partial_uploads: partials, dry_run: dryRun, complete };
}

/** The caller holds the oid's deletion gate. True when bytes were removed. */
async function deleteBytes(deps: MaintenanceDeps, oid: Oid): Promise<boolean> {
  const removed = await deps.store.delete(oid);
  await deps.maint.deleted(oid);
  return removed;
}

/**
 * Deletion intents a killed retain left (on a node no longer live): remove the bytes unless the oid
 * was stored again since.
 */
async function finishIntents(deps: MaintenanceDeps): Promise<void> {
  const { maint, uploads } = deps;
  for (const oid of await maint.pendingDeletes(deps.node.liveSince())) {
    if (uploads.isUploading(oid)) continue; // decided by the next run
    const open = uploads.markDeleting(oid);
    try {
      // Recorded again since ('stored': the intent is dropped) or being written on a live node ('in_flight': next run).
      if ((await maint.settleIntent(oid, deps.node.liveSince())) === 'delete') await deleteBytes(deps, oid);
    } finally {
      open();
    }
  }
}

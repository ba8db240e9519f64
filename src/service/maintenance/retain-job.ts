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
   * Bytes of the references dropped (legacy files removed): each object's stored size counted in
   * full, as the repository's stats count it, whether or not another repository still holds it. What
   * the shared store really frees is never told here: it would reveal which oids other repositories hold.
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
 * Retain: the client names every oid the repository still references; the repository's other
 * references are dropped, except what was uploaded or referenced within the grace period and what an
 * upload in flight is writing. An object's bytes are deleted (`store.delete`, every backend: a disk
 * file, a bucket key, a journal entry) only when no repository references it.
 *
 * Crash-safe order: the oid is marked in this node's deletion gate in the same synchronous step as
 * the check that no upload of it is in flight here, so an upload arriving now waits for the delete
 * to settle and then stores fresh bytes instead of finding these "already stored"; then one index
 * transaction drops the reference and — for the last one — the object row, recording a deletion
 * intent unless a write of the oid is in flight on another node (the index holds those; that write
 * records the object again, so its bytes stay); then the store deletes, the intent is cleared and
 * the gate opens. Uploads on other nodes see the intent and wait. A crash leaves at worst an
 * intent, which the next retain finishes. With several nodes all of it runs inside a sweep, so that
 * every upload in flight anywhere is recorded in the index before the first drop.
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

/** Deletes the bytes of an oid whose intent is recorded (the caller holds its deletion gate), then clears the intent. True when bytes were removed. */
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

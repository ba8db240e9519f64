import type { RepoName } from '../../protocol/repo-name.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { forEachLimited } from './worker-tasks.js';
import { adoptVerifiedFile } from './adopt-object.js';

export interface DedupeReport {
  [key: string]: unknown;
  /** Legacy files found (named as an oid, in their shard folders). */
  readonly objects: number;
  /** Folded: now a reference to the shared copy. */
  readonly folded: number;
  /** Of those, moved into the shared store (it did not hold the oid yet). */
  readonly moved: number;
  /** Of those, freed because the shared store already held the oid. */
  readonly already_shared: number;
  /** Bytes freed by dropping duplicates of shared objects. */
  readonly bytes_freed: number;
  /** Files refused: not hashing to their name (renamed `<oid>.refused`), or not named `ab/cd/<oid>` (left in place). */
  readonly refused: number;
  /** Files that could not be read: left where they are. */
  readonly unreadable: number;
  readonly complete: boolean;
  readonly refused_objects: readonly string[];
  /** Files in the folder that are not objects of its layout, with why (up to LISTED_MAX). */
  readonly refused_files: readonly { readonly path: string; readonly reason: string }[];
  /** `<oid>.refused` / `<oid>.corrupt` files earlier runs set aside, still there for inspection. */
  readonly set_aside: number;
}

/**
 * Dedupe: folds the repository's legacy files (docs/maintenance.md) into the shared store (disk only).
 * A file that does not hash to its name never enters it; a match is hard-linked under `objects/`, the
 * reference recorded, and only then the legacy name removed, so a killed run loses nothing.
 */
export async function runDedupe(deps: MaintenanceDeps, repo: RepoName, ctx: JobContext): Promise<DedupeReport> {
  const { tasks } = deps;
  const legacy = deps.store.legacy;
  // A backend without a legacy layout (S3) has no such folder: an empty one is what there is to fold.
  const scan = legacy === null ? { objects: [], strays: [], strayCounts: {} } : await legacy.scanLegacy(repo, LISTED_MAX);
  const files = scan.objects;
  const { set_aside: setAside = 0, ...strayCounts } = scan.strayCounts;
  const strays = Object.values(strayCounts).reduce((n, c) => n + c, 0);
  ctx.progress.objectsTotal = files.length;
  ctx.progress.bytesTotal = files.reduce((n, f) => n + f.size, 0);
  let folded = 0;
  let moved = 0;
  let already = 0;
  let freed = 0;
  let refused = 0;
  let unreadable = 0;
  const refusedList: string[] = [];

  const complete = await forEachLimited(files, tasks.parallelism, ctx.signal, async (f) => {
    const meter = ctx.progress.meter();
    const r = await tasks.hash(f.path, meter);
    ctx.progress.objectDone(f.size, meter);
    if (r.outcome === 'missing') return; // folded by a concurrent run
    if (r.outcome !== 'ok') {
      unreadable++;
      return;
    }
    if (r.sha256 !== f.oid) {
      refused++;
      if (refusedList.length < LISTED_MAX) refusedList.push(f.oid);
      await legacy!.setAsideLegacy(repo, f.oid, 'refused');
      return;
    }
    const linked = await adoptVerifiedFile(deps, legacy!, repo, f.oid, f.path, r.size);
    folded++;
    if (linked) moved++;
    else {
      already++;
      freed += r.size;
    }
  });
  return {
    objects: files.length,
    folded,
    moved,
    already_shared: already,
    bytes_freed: freed,
    refused: refused + strays,
    unreadable,
    complete,
    refused_objects: refusedList,
    refused_files: scan.strays.map((s) => ({ path: s.rel, reason: s.reason })),
    set_aside: setAside,
  };
}

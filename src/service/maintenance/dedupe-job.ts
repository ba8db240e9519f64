import type { RepoName } from '../../protocol/repo-name.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { forEachLimited } from './worker-tasks.js';

/** POST /{org}/{repo}/objects/dedupe's answer. */
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
  /** Files that do not hash to their name: never enter the shared store; renamed `<oid>.refused`. */
  readonly refused: number;
  /** Files that could not be read: left where they are. */
  readonly unreadable: number;
  readonly complete: boolean;
  readonly refused_objects: readonly string[];
}

/**
 * Dedupe: folds the repository's legacy files (`repos/{org}/{repo}/ab/cd/<oid>`, design §3) into the
 * shared store. Each file is hashed on the worker pool; one that does not match its name never
 * enters the shared store. A matching one is hard-linked under `objects/` (no copy) when the store
 * does not hold the oid yet, its directory fsync'd, then the reference recorded, and only then the
 * legacy name removed — so at every instant the object is served from one place or the other, and a
 * second run finishes whatever a killed one left.
 */
export async function runDedupe(deps: MaintenanceDeps, repo: RepoName, ctx: JobContext): Promise<DedupeReport> {
  const { store, objects, tasks } = deps;
  const files = await store.listLegacy(repo);
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
    const r = await tasks.hash(f.path, true, meter);
    ctx.progress.objectDone(f.size, meter);
    if (r.outcome === 'missing') return; // folded by a concurrent run
    if (r.outcome !== 'ok') {
      unreadable++;
      return;
    }
    if (r.sha256 !== f.oid) {
      refused++;
      if (refusedList.length < LISTED_MAX) refusedList.push(f.oid);
      await store.setAsideLegacy(repo, f.oid, 'refused');
      return;
    }
    // A quarantined shared copy is bad bytes: move it aside so this good file takes its place.
    if (objects.isQuarantined(f.oid)) await store.quarantineFile(f.oid);
    const linked = await store.linkObject(f.oid, f.path);
    const shared = objects.findShared(f.oid);
    const storedSize = linked ? r.size : (shared?.storedSize ?? (await store.objectFileSize(f.oid)) ?? r.size);
    // Recorded only once the shared copy is durable; addReference also lifts a quarantine mark.
    objects.addReference(repo.key, f.oid, r.size, storedSize);
    await store.purge(f.path);
    folded++;
    if (linked) moved++;
    else {
      already++;
      freed += r.size;
    }
  });
  return { objects: files.length, folded, moved, already_shared: already, bytes_freed: freed, refused, unreadable, complete, refused_objects: refusedList };
}

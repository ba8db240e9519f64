import type { ObjectsRepo } from '../db/objects-repo.js';
import type { DiskBlobStore } from '../store/disk.js';

type Log = (msg: string, fields: object) => void;

/**
 * What a killed process left in the store, removed at start: its staging files, retain's trash, and
 * object files no reference points to (renamed into place, never acknowledged). Runs with the data
 * directory locked, after journal replay and before the server listens, so nothing is in flight: a
 * file an upload has just renamed and not yet recorded cannot be mistaken for an orphan.
 *
 * Only litter goes, so a failure here (a full disk cannot even create `trash/`) is logged and the
 * start goes on: the next start tries again.
 */
export async function sweepAfterCrash(store: DiskBlobStore, objects: ObjectsRepo, log: Log): Promise<void> {
  try {
    await sweep(store, objects, log);
  } catch (e) {
    log('start-up sweep failed; what is left is swept at the next start', { err: String(e) });
  }
}

async function sweep(store: DiskBlobStore, objects: ObjectsRepo, log: Log): Promise<void> {
  const staging = await store.clearStaging();
  if (staging > 0) log('swept staging files left by an earlier run', { count: staging });
  await store.emptyTrash(); // files a killed retain had already taken out of the index
  const orphans = store.findOrphans((oid) => objects.findShared(oid) !== null);
  if (orphans.length === 0) return;
  const bytes = orphans.reduce((n, o) => n + o.size, 0);
  // An index that knows nothing beside a store full of files was lost or replaced, not a crash's
  // litter: those bytes may be all that is left, so they stay for the operator.
  if (!objects.hasAny()) {
    log('objects/ holds files the index does not know, and the index is empty: left in place', { count: orphans.length, bytes });
    return;
  }
  for (const o of orphans) await store.purge(o.path);
  log('removed object files no reference points to (uploads cut before they were acknowledged)', { count: orphans.length, bytes });
}

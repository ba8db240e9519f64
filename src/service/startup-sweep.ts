import type { ObjectIndex } from '../db/index-types.js';
import type { Oid } from '../protocol/oid.js';

export interface SweptStore {
  clearStaging(): Promise<number>;
  findOrphans(isKnown: (oid: Oid) => boolean | Promise<boolean>): Promise<{ path: string; size: number }[]>;
  removeOrphan(path: string): Promise<void>;
}

type Log = (msg: string, fields: object) => void;

/** Removes what a killed process left (staging files, unreferenced objects) at start, before listening; a failure is logged, the start goes on. */
/** `journaled`: oids whose bytes the journal holds (known, whatever the index says). */
export async function sweepAfterCrash(store: SweptStore, objects: ObjectIndex, journaled: (oid: Oid) => boolean, log: Log): Promise<void> {
  try {
    await sweep(store, objects, journaled, log);
  } catch (e) {
    log('start-up sweep failed; what is left is swept at the next start', { err: String(e) });
  }
}

async function sweep(store: SweptStore, objects: ObjectIndex, journaled: (oid: Oid) => boolean, log: Log): Promise<void> {
  const staging = await store.clearStaging();
  if (staging > 0) log('swept staging files left by an earlier run', { count: staging });
  const orphans = await store.findOrphans(async (oid) => journaled(oid) || (await objects.findShared(oid)) !== null);
  if (orphans.length === 0) return;
  const bytes = orphans.reduce((n, o) => n + o.size, 0);
  // An index that knows nothing beside a store full of files was lost or replaced, not a crash's
  // litter: those bytes may be all that is left, so they stay for the operator.
  if (!(await objects.hasAny())) {
    log('objects/ holds files the index does not know, and the index is empty: left in place', { count: orphans.length, bytes });
    return;
  }
  for (const o of orphans) await store.removeOrphan(o.path);
  log('removed object files no reference points to (uploads cut before they were acknowledged)', { count: orphans.length, bytes });
}

import type { KeyRing } from '../../crypto/key-ring.js';
import type { DataKeyIndex } from '../../db/index-types.js';
import { isLfsError } from '../../errors/errors.js';
import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import { sealingStore } from '../../store/compose.js';
import type { BlobReader, BlobStore, PutResult } from '../../store/types.js';
import { reportBytes } from '../../workers/byte-meter.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { pumpInto, withObjectPull } from './object-io.js';
import { dataKeyOf } from './stored-data-key.js';
import { forEachLimited } from './worker-tasks.js';

/** What rekey and encrypt need beyond every job's: the key ring, the data keys, the backend's bytes as stored. */
export interface ReencryptDeps {
  readonly keys: KeyRing;
  readonly dataKeys: DataKeyIndex;
  /** The backend itself, under the encrypting layer: where a copy's header says whether and under which data key it is encrypted. */
  readonly stored: BlobStore;
}

/** POST /{org}/{repo}/objects/rekey's and …/encrypt's answer. */
export interface ReencryptReport {
  [key: string]: unknown;
  readonly kind: 'rekey' | 'encrypt';
  readonly objects: number;
  /** Encrypted copies written again under a fresh data key (rekey), their old data key deleted. */
  readonly rekeyed: number;
  /** Copies stored in the clear, now encrypted. */
  readonly encrypted: number;
  /** Encrypt only: left as they are. */
  readonly already_encrypted: number;
  /** Not in the backend itself (a small object the journal still holds), or deleted since the listing. */
  readonly skipped: number;
  /** Did not hash to their oid or could not be read: left alone (run an audit). */
  readonly refused: number;
  /** Stored bytes written (the new copies). */
  readonly bytes_written: number;
  readonly complete: boolean;
  readonly refused_objects: readonly string[];
}

/**
 * Rekey (every object) and encrypt (copies in the clear): each object is read as a download reads it
 * and written with `replace: true` through verify(compress(encrypt(backend))), so bytes that do not
 * match their oid never replace anything. The new data key is in the index before the copy is
 * visible; the old one is deleted once it is replaced, so a leaked key opens nothing still held.
 * Interrupted at any point, every object is one whole copy with its key; a second run finishes.
 */
export async function runReencrypt(deps: MaintenanceDeps, crypt: ReencryptDeps, kind: 'rekey' | 'encrypt', repo: RepoName, ctx: JobContext): Promise<ReencryptReport> {
  const { store, maint, objects, tasks } = deps;
  const rows = (await maint.repoObjects(repo.key)).filter((r) => !r.quarantined);
  ctx.progress.objectsTotal = rows.length;
  ctx.progress.bytesTotal = rows.reduce((n, r) => n + r.size, 0);
  const writers = {
    framed: sealingStore(crypt.stored, crypt.dataKeys, crypt.keys, tasks, deps.hasher, deps.compressionLevel),
    plain: sealingStore(crypt.stored, crypt.dataKeys, crypt.keys, tasks, deps.hasher, null),
  };
  let rekeyed = 0;
  let encrypted = 0;
  let already = 0;
  let skipped = 0;
  let refused = 0;
  let written = 0;
  const refusedList: string[] = [];
  const refuse = (oid: Oid, why: string): void => {
    refused++;
    if (refusedList.length < LISTED_MAX) refusedList.push(oid);
    deps.log(`${kind} refused an object`, { level: 'warn', repo: repo.key, oid, detail: why });
  };

  const complete = await forEachLimited(rows, tasks.parallelism, ctx.signal, async (row) => {
    const meter = ctx.progress.meter();
    let reader: BlobReader | null = null;
    try {
      const before = await dataKeyOf(crypt.stored, row.oid);
      // Not in the backend itself (a small object the journal still holds): nothing to replace.
      if (before === 'absent' || (await objects.findInRepo(repo.key, row.oid)) === null) return void skipped++;
      if (kind === 'encrypt' && before !== 'plain') return void already++;
      try {
        reader = await store.open(row.oid);
      } catch (e) {
        return refuse(row.oid, (e as Error).message);
      }
      if (reader === null) return void skipped++; // deleted by retain since the listing
      const source = reader;
      let put: PutResult;
      try {
        // The new copy sits beside the old one until it replaces it: kept out of the disk's reserve.
        deps.uploads.admitBytes(row.size);
        const w = await (source.framed === true ? writers.framed : writers.plain).createWriter(row.oid, { expectedSize: row.size, replace: true });
        put = await withObjectPull(source, (pull) => pumpInto(pull, w, (n) => reportBytes(meter.buffer, n)));
      } catch (e) {
        // A full store fails the job (as an upload gets 507); anything else is this object's problem.
        if (isLfsError(e) && e.status === 507) throw e;
        return refuse(row.oid, (e as Error).message);
      }
      written += put.storedSize;
      if (put.storedSize !== row.storedSize) await objects.setStoredSize(row.oid, put.storedSize);
      if (before === 'plain') encrypted++;
      else rekeyed++;
    } finally {
      await reader?.close().catch(() => undefined);
      ctx.progress.objectDone(row.size, meter);
    }
  });
  return {
    kind,
    objects: rows.length,
    rekeyed,
    encrypted,
    already_encrypted: already,
    skipped,
    refused,
    bytes_written: written,
    complete,
    refused_objects: refusedList,
  };
}

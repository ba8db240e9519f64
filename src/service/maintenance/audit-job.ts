import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import { reportBytes, type ByteMeter } from '../../workers/byte-meter.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { digestOf, withObjectPull } from './object-io.js';
import { forEachLimited } from './worker-tasks.js';

export interface AuditProblem {
  readonly oid: string;
  /** Where it is stored: the shared store, or the repository's legacy folder. */
  readonly layout: 'shared' | 'legacy';
  readonly detail: string;
}

export interface AuditReport {
  [key: string]: unknown;
  readonly objects: number;
  readonly bytes: number;
  readonly ok: number;
  /** Read in full, but the bytes do not hash to the oid (or have another size). */
  readonly corrupt: number;
  /** Could not be read as a download would: missing file, I/O error, a damaged frame. */
  readonly unreadable: number;
  readonly complete: boolean;
  /** Objects quarantined by this audit (0 unless it was asked to quarantine). */
  readonly quarantined: number;
  /** 'applied', 'not_needed', or 'not_requested' when bad objects were found by a read-only audit. */
  readonly quarantine: 'applied' | 'not_needed' | 'not_requested';
  /** Objects already quarantined by an earlier audit and not re-uploaded since (not read again). */
  readonly already_quarantined: number;
  readonly corrupt_objects: readonly AuditProblem[];
  readonly unreadable_objects: readonly AuditProblem[];
}

/**
 * Audit: reads every object back as a download does and checks sha256 and size. Asked to quarantine:
 * the index mark first (so the next push uploads good bytes), then the bytes move aside.
 */
export async function runAudit(deps: MaintenanceDeps, repo: RepoName, canQuarantine: boolean, ctx: JobContext): Promise<AuditReport> {
  const { store, maint, objects, tasks } = deps;
  const rows = await maint.repoObjects(repo.key);
  const legacy = store.legacy === null ? [] : (await store.legacy.scanLegacy(repo, 0)).objects;
  const live = rows.filter((r) => !r.quarantined);
  const already = rows.length - live.length;
  ctx.progress.objectsTotal = live.length + legacy.length;
  ctx.progress.bytesTotal = live.reduce((n, r) => n + r.size, 0) + legacy.reduce((n, l) => n + l.size, 0);

  const corrupt: AuditProblem[] = [];
  const unreadable: AuditProblem[] = [];
  let corruptN = 0;
  let unreadableN = 0;
  let ok = 0;
  let checked = 0;
  let bytes = 0;
  let quarantined = 0;
  const found = async (kind: 'corrupt' | 'unreadable', layout: 'shared' | 'legacy', oid: Oid, detail: string): Promise<void> => {
    const list = kind === 'corrupt' ? corrupt : unreadable;
    if (kind === 'corrupt') corruptN++;
    else unreadableN++;
    if (list.length < LISTED_MAX) list.push({ oid, layout, detail });
    if (!canQuarantine) return;
    // An operator must know: clients cannot fetch this object until someone pushes it again.
    deps.log('object quarantined', { level: 'warn', repo: repo.key, oid, layout, problem: kind, detail });
    if (layout === 'shared') {
      // Mark first: batch reports it missing from now on; the file move is repeated by the next
      // upload of the oid if this process dies in between.
      deps.uploads.withdrawGrants(oid);
      await maint.quarantine(oid, repo.key, `${kind}: ${detail}`);
      await store.quarantine(oid);
    } else {
      await store.legacy!.setAsideLegacy(repo, oid, 'corrupt');
    }
    quarantined++;
  };

  const sharedDone = await forEachLimited(live, tasks.parallelism, ctx.signal, async (row) => {
    // Dropped by retain since the listing: no longer this repository's object.
    if ((await objects.findInRepo(repo.key, row.oid)) === null) return ctx.progress.objectDone(row.size);
    const meter = ctx.progress.meter();
    const r = await readBack(deps, row.oid, meter);
    checked++;
    ctx.progress.objectDone(row.size, meter);
    bytes += r.size;
    if (r.outcome !== 'ok') await found('unreadable', 'shared', row.oid, r.detail);
    else if (r.sha256 !== row.oid) await found('corrupt', 'shared', row.oid, `content hashes to ${r.sha256}`);
    else if (r.size !== row.size) await found('corrupt', 'shared', row.oid, `${r.size} bytes, the index says ${row.size}`);
    else ok++;
  });
  const legacyDone = await forEachLimited(legacy, tasks.parallelism, ctx.signal, async (l) => {
    const meter = ctx.progress.meter();
    const r = await tasks.hash(l.path, meter);
    ctx.progress.objectDone(l.size, meter);
    if (r.outcome === 'missing') return; // folded by a dedupe meanwhile
    checked++;
    bytes += r.size;
    if (r.outcome !== 'ok') await found('unreadable', 'legacy', l.oid, r.detail ?? r.outcome);
    else if (r.sha256 !== l.oid) await found('corrupt', 'legacy', l.oid, `content hashes to ${r.sha256}`);
    else ok++;
  });
  const complete = sharedDone && legacyDone;
  const bad = corruptN + unreadableN;
  await deps.stats.recordAudit(repo.key, { finishedAt: Date.now(), objects: checked, bytes, corrupt: corruptN, unreadable: unreadableN, complete });
  return {
    objects: checked,
    bytes,
    ok,
    corrupt: corruptN,
    unreadable: unreadableN,
    complete,
    quarantined,
    quarantine: bad === 0 ? 'not_needed' : canQuarantine ? 'applied' : 'not_requested',
    already_quarantined: already,
    corrupt_objects: corrupt,
    unreadable_objects: unreadable,
  };
}

type ReadBack = { readonly outcome: 'ok'; readonly sha256: string; readonly size: number; readonly detail: null } | { readonly outcome: 'unreadable'; readonly sha256: null; readonly size: number; readonly detail: string };

async function readBack(deps: MaintenanceDeps, oid: Oid, meter: ByteMeter): Promise<ReadBack> {
  const unreadable = (detail: string, size = 0): ReadBack => ({ outcome: 'unreadable', sha256: null, size, detail });
  let reader;
  try {
    // A small object still only in the journal is read through the whole stack.
    reader = (await deps.reader.open(oid)) ?? (await deps.store.open(oid));
  } catch (e) {
    return unreadable((e as Error).message);
  }
  if (reader === null) return unreadable("the object's bytes are missing from the store");
  try {
    const r = await withObjectPull(reader, (pull) => digestOf(pull, reader.size, deps.hasher, (n) => reportBytes(meter.buffer, n)));
    return { outcome: 'ok', sha256: r.sha256, size: r.size, detail: null };
  } catch (e) {
    return unreadable((e as Error).message);
  } finally {
    await reader.close().catch(() => undefined);
  }
}

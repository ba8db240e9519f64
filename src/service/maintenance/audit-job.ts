import { createHash } from 'node:crypto';
import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { HashFileResult } from '../../workers/maintenance.worker.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { forEachLimited } from './worker-tasks.js';

/** One object an audit found wrong. */
export interface AuditProblem {
  readonly oid: string;
  /** Where it is stored: the shared store, or the repository's legacy folder. */
  readonly layout: 'shared' | 'legacy';
  readonly detail: string;
}

/** POST /{org}/{repo}/objects/audit's answer. */
export interface AuditReport {
  [key: string]: unknown;
  /** Objects read back (shared and legacy). */
  readonly objects: number;
  readonly bytes: number;
  readonly ok: number;
  /** Read in full, but the bytes do not hash to the oid (or have another size). */
  readonly corrupt: number;
  /** Could not be read as a download would: missing file, I/O error, a damaged frame. */
  readonly unreadable: number;
  /** True when every object of the repository was read back. */
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

/** Objects whose file is missing but which the store still serves (small objects in its journal) are read here. */
const JOURNAL_READ_MAX = 4 << 20;

/**
 * Audit: reads every object of the repository back the way a download does (framed objects: each
 * frame's BLAKE3, then zstd; plain ones as stored; legacy files as served) on the worker pool and
 * checks the sha256 of what comes out against the oid and the size against the index. Read-only
 * unless asked to quarantine (which needs admin; restic's `check` is read-only too); then each bad
 * object is quarantined: the index mark goes first (batch then reports it missing so the
 * next push uploads good bytes, and downloads 404), then its file moves to `quarantine/`; a legacy
 * file is renamed `<oid>.corrupt`. The result is recorded for the repository page.
 */
export async function runAudit(deps: MaintenanceDeps, repo: RepoName, canQuarantine: boolean, ctx: JobContext): Promise<AuditReport> {
  const { store, maint, objects, tasks } = deps;
  const rows = maint.repoObjects(repo.key);
  const legacy = await store.listLegacy(repo);
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
      // Mark first: from this instant batch reports it missing and nothing serves it; the file move
      // after it is repeated by the next upload of the oid if this process dies in between.
      maint.quarantine(oid, repo.key, `${kind}: ${detail}`);
      await store.quarantineFile(oid);
    } else {
      await store.setAsideLegacy(repo, oid, 'corrupt');
    }
    quarantined++;
  };

  const sharedDone = await forEachLimited(live, tasks.parallelism, ctx.signal, async (row) => {
    // Dropped by retain since the listing: no longer this repository's object.
    if (objects.findInRepo(repo.key, row.oid) === null) return ctx.progress.objectDone(row.size);
    const meter = ctx.progress.meter();
    let r = await tasks.hash(store.pathOf(row.oid), false, meter);
    if (r.outcome === 'missing') r = await readFromStore(deps, row.oid);
    checked++;
    ctx.progress.objectDone(row.size, meter);
    bytes += r.size;
    if (r.outcome !== 'ok') await found('unreadable', 'shared', row.oid, r.detail ?? r.outcome);
    else if (r.sha256 !== row.oid) await found('corrupt', 'shared', row.oid, `content hashes to ${r.sha256}`);
    else if (r.size !== row.size) await found('corrupt', 'shared', row.oid, `${r.size} bytes, the index says ${row.size}`);
    else ok++;
  });
  const legacyDone = await forEachLimited(legacy, tasks.parallelism, ctx.signal, async (l) => {
    const meter = ctx.progress.meter();
    const r = await tasks.hash(l.path, true, meter);
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
  deps.stats.recordAudit(repo.key, { finishedAt: Date.now(), objects: checked, bytes, corrupt: corruptN, unreadable: unreadableN, complete });
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

/**
 * An object with no file of its own yet (a small object still in the store's journal): read it
 * through the store as a download does. Small by construction, so hashing it here is cheap.
 */
async function readFromStore(deps: MaintenanceDeps, oid: Oid): Promise<HashFileResult> {
  const reader = await deps.store.open(oid).catch(() => null);
  if (reader === null) return { outcome: 'missing', sha256: null, size: 0, storedSize: 0, framed: false, detail: 'the object file is missing' };
  try {
    if (reader.size > JOURNAL_READ_MAX) return { outcome: 'unreadable', sha256: null, size: 0, storedSize: 0, framed: false, detail: 'no file and too large to read here' };
    const h = createHash('sha256');
    if (reader.size > 0) {
      const src = reader.read(0, reader.size - 1);
      try {
        for (let c = await src.next(); c !== null; c = await src.next()) h.update(c);
      } finally {
        await src.close();
      }
    }
    return { outcome: 'ok', sha256: h.digest('hex'), size: reader.size, storedSize: reader.storedSize, framed: reader.framed, detail: null };
  } catch (e) {
    return { outcome: 'unreadable', sha256: null, size: 0, storedSize: 0, framed: false, detail: (e as Error).message };
  } finally {
    await reader.close();
  }
}

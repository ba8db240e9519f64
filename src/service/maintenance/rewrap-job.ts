import { setImmediate as nextTurn } from 'node:timers/promises';
import { KeyRingError, type KeyRing } from '../../crypto/key-ring.js';
import type { DataKeyIndex, DataKeyRow } from '../../db/index-types.js';
import { sweepDataKeys, type DataKeySweepDeps } from './data-key-sweep.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX } from './maintenance-deps.js';

/** What the rewrap job works with: the key ring this node loaded and the index's data keys. */
export interface RewrapDeps {
  readonly keys: KeyRing;
  readonly dataKeys: DataKeyIndex;
  /** Rows read from the index per query (SVC_REWRAP_BATCH). */
  readonly batch: number;
  /** Asked to sweep (`"sweep": true`): first delete the data key rows no stored copy names. */
  readonly sweep: DataKeySweepDeps | null;
  /** The node's journal, whose segments' keys are wrapped in the segments themselves; null without one. */
  readonly journal: RetirableJournal | null;
  readonly log: (msg: string, fields: object) => void;
}

/** What rewrap asks of the journal: the keys wrapping its segments on disk, and to write every segment out now (then the keys still in use). */
export interface RetirableJournal {
  kekIdsInUse(): string[];
  retireAll(): Promise<string[]>;
}

/** POST /-/objects/rewrap's answer. */
export interface RewrapReport {
  [key: string]: unknown;
  /** The key every data key is now wrapped with (the first of the key file). */
  readonly current_key: string;
  /** Data keys found under another key. */
  readonly data_keys: number;
  readonly rewrapped: number;
  /** Rewrapped or deleted by someone else between the read and the write (another node's rewrap, a rekey). */
  readonly changed_meanwhile: number;
  /** Under a key this node does not hold, or whose wrap does not authenticate: left as they are. */
  readonly unwrappable: number;
  readonly unwrappable_keys: readonly string[];
  /** Data key rows no stored copy names, deleted before rewrapping (0 unless asked to sweep). */
  readonly unused_data_keys: number;
  /** No stored object is rewritten: index rows only (a journal written out adds new files, never rewrites). */
  readonly object_bytes_written: 0;
  /** Key ids still wrapping some data key once the job ended: those cannot leave the key file yet. */
  readonly keys_in_use: readonly string[];
  /** Keys of the key file that wrap nothing any more: safe to remove (then restart every node). */
  readonly retirable_keys: readonly string[];
  readonly complete: boolean;
}

/**
 * Rewrap: every data key not under the ring's current key is wrapped again under it; no object byte
 * is touched. Each row is a compare-and-set on the key it was read under, so a row changed meanwhile
 * is left alone, and a stopped job resumes: rows done no longer match the query.
 */
export async function runRewrap(deps: RewrapDeps, ctx: JobContext): Promise<RewrapReport> {
  const { keys, dataKeys } = deps;
  const current = keys.currentId;
  // Swept first: a row no copy needs is not worth rewrapping, and left under an old key it would keep that key in use.
  const swept = deps.sweep === null ? null : await sweepDataKeys(deps.sweep, false, ctx.signal);
  if (swept !== null && swept.swept > 0) deps.log('unused data keys deleted', { count: swept.swept });
  ctx.progress.objectsTotal = await countPending(dataKeys, current, deps.batch, ctx.signal);
  let seen = 0;
  let rewrapped = 0;
  let changed = 0;
  let unwrappable = 0;
  const missing = new Set<string>();
  let after: string | null = null;
  let complete = swept?.complete !== false;
  for (;;) {
    if (ctx.signal.aborted) {
      complete = false;
      break;
    }
    const rows: DataKeyRow[] = await dataKeys.dataKeysNotWrappedWith(current, after, deps.batch);
    if (rows.length === 0) break;
    for (const row of rows) {
      if (ctx.signal.aborted) break;
      after = row.dataKeyId;
      seen++;
      const outcome = await rewrapOne(keys, dataKeys, row);
      if (outcome === 'rewrapped') rewrapped++;
      else if (outcome === 'changed') changed++;
      else {
        unwrappable++;
        if (missing.size < LISTED_MAX) missing.add(row.kekId);
        deps.log('rewrap left a data key it cannot unwrap', { level: 'warn', data_key: row.dataKeyId, kek: row.kekId, detail: outcome.problem });
      }
      ctx.progress.objectDone(0);
    }
    // The embedded index answers without ever leaving this turn: requests get theirs between pages.
    await nextTurn();
  }
  // Journal segments are not rewrapped: once the rows are, they are written out (their objects get
  // data keys under the current key), so an old key wraps nothing left on disk.
  let journalKeys = deps.journal?.kekIdsInUse() ?? [];
  if (complete && journalKeys.some((id) => id !== current)) journalKeys = await deps.journal!.retireAll();
  const inUse = [...new Set([...(await dataKeys.kekIdsInUse()), ...journalKeys])];
  return {
    current_key: current,
    data_keys: seen,
    rewrapped,
    changed_meanwhile: changed,
    unwrappable,
    unwrappable_keys: [...missing].sort(),
    unused_data_keys: swept?.swept ?? 0,
    object_bytes_written: 0,
    keys_in_use: [...inUse].sort(),
    retirable_keys: keys.ids().filter((id) => !inUse.includes(id)),
    complete,
  };
}

/** Rows to do, counted before the work for the progress figures (index rows only, a page at a time). */
async function countPending(dataKeys: DataKeyIndex, current: string, batch: number, signal: AbortSignal): Promise<number> {
  let n = 0;
  let after: string | null = null;
  // Counting pages are larger than work pages: they only read.
  const page = Math.max(batch, 1000);
  while (!signal.aborted) {
    const rows = await dataKeys.dataKeysNotWrappedWith(current, after, page);
    n += rows.length;
    if (rows.length < page) break;
    after = rows[rows.length - 1]!.dataKeyId;
  }
  return n;
}

type RowOutcome = 'rewrapped' | 'changed' | { readonly problem: string };

async function rewrapOne(keys: KeyRing, dataKeys: DataKeyIndex, row: DataKeyRow): Promise<RowOutcome> {
  let plain: Buffer;
  try {
    plain = keys.unwrap(row.kekId, row.dataKeyId, row.wrapped);
  } catch (e) {
    if (e instanceof KeyRingError) return { problem: e.message };
    throw e;
  }
  try {
    const next = keys.wrap(plain, row.dataKeyId);
    return (await dataKeys.rewrapDataKey(row.dataKeyId, row.kekId, next.kekId, next.wrapped)) ? 'rewrapped' : 'changed';
  } finally {
    plain.fill(0); // the raw data key lives no longer than it must
  }
}

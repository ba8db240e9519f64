import type { DataKeyIndex } from '../../db/index-types.js';
import type { Oid } from '../../protocol/oid.js';
import type { BlobStore } from '../../store/types.js';
import { dataKeyOf } from './stored-data-key.js';
import { forEachLimitedAsync } from './worker-tasks.js';

/** What the data key sweep reads and deletes. */
export interface DataKeySweepDeps {
  readonly dataKeys: DataKeyIndex;
  /** The backend itself, under the encrypting layer: each stored copy's header names its data key. */
  readonly stored: BlobStore;
  /** Rows written this recently are never taken (see sweepDataKeys). */
  readonly graceMs: number;
  readonly now: () => number;
  /** Headers read at once (a ranged read each on a bucket). */
  readonly parallelism: number;
  readonly log: (msg: string, fields: object) => void;
}

export interface DataKeySweepResult {
  /** Rows deleted (in a dry run: that would be). */
  readonly swept: number;
  /** False when stopped, or when some stored copy's data key could not be told: then nothing was deleted. */
  readonly complete: boolean;
}

/** Candidate rows read and deleted per index statement. */
const PAGE = 500;

/**
 * Deletes the data key rows no stored copy names: those of writes that died between recording
 * their key and making their copy visible, of copies an audit quarantined, of replaced copies whose
 * key delete failed. Every stored copy's header is read (48 bytes, nothing decrypted), then rows
 * written before now - grace that no header named go.
 *
 * A write records its row before its copy becomes visible, and a copy can appear after the listing
 * passed its place, on this node or another: the grace is what keeps such a row. It is at least
 * SVC_STAGING_MAX_AGE, past which an unfinished write's staged bytes are litter that is swept, so a
 * row older than the grace whose copy is not stored belongs to a write that can no longer finish.
 * Nodes stamp rows with their own clocks: their skew must stay far below the grace (it is seconds
 * against hours). The delete re-checks the age in the index, so a row is only ever taken if old.
 */
export async function sweepDataKeys(deps: DataKeySweepDeps, dryRun: boolean, signal: AbortSignal): Promise<DataKeySweepResult> {
  const before = deps.now() - deps.graceMs;
  // Nothing old enough: no need to read a single header.
  if ((await deps.dataKeys.dataKeyIdsWrittenBefore(before, null, 1)).length === 0) return { swept: 0, complete: true };
  const named = await namedDataKeys(deps, signal);
  if (named === null) return { swept: 0, complete: false };
  let swept = 0;
  for (let after: string | null = null; !signal.aborted; ) {
    const ids = await deps.dataKeys.dataKeyIdsWrittenBefore(before, after, PAGE);
    if (ids.length === 0) return { swept, complete: true };
    after = ids[ids.length - 1]!;
    const unnamed = ids.filter((id) => !named.has(id));
    swept += dryRun ? unnamed.length : await deps.dataKeys.deleteDataKeysWrittenBefore(unnamed, before);
  }
  return { swept, complete: false };
}

/**
 * The data key id of every stored copy; null when any copy's could not be told (an unreadable or
 * damaged header, a failed listing) or the sweep was stopped: a row it might name must stay.
 */
async function namedDataKeys(deps: DataKeySweepDeps, signal: AbortSignal): Promise<Set<string> | null> {
  const named = new Set<string>();
  let untold = 0;
  let example = null as { oid: Oid; detail: string } | null;
  try {
    const listed = await forEachLimitedAsync(deps.stored.list(), deps.parallelism, signal, async (copy) => {
      let id: string;
      try {
        id = await dataKeyOf(deps.stored, copy.oid);
      } catch (e) {
        id = 'damaged';
        example ??= { oid: copy.oid, detail: (e as Error).message };
      }
      if (id === 'damaged') untold++;
      else if (id !== 'plain' && id !== 'absent') named.add(id);
    });
    if (!listed) return null;
  } catch (e) {
    deps.log('data key sweep skipped: the store could not be listed', { level: 'warn', err: String(e) });
    return null;
  }
  if (untold === 0) return named;
  deps.log('data key sweep skipped: some stored copies do not say their data key (run an audit)', { level: 'warn', copies: untold, ...(example ?? {}) });
  return null;
}

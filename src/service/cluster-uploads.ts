import { setTimeout as sleep } from 'node:timers/promises';
import type { MaintenanceIndex, SettingGuard, UploadCommit } from '../db/index-types.js';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { ClusterNode, SweepWatcher } from './cluster-node.js';

/** How long an upload waits for another node's delete of its oid before answering 503. */
const DELETE_WAIT_MS = 30_000;
const DELETE_POLL_MS = 100;

interface Upload {
  readonly oid: Oid;
  ticket: number | null;
  /** The row is gone (ended with the reference, or by endUpload). */
  ended: boolean;
  done: boolean;
}

/** What a write running as a cluster upload gets (TransferService turns it into an UploadInProgress). */
export interface ClusterWrite {
  /** Learnt when the upload recorded itself in flight; null when it did not (the reference's statement checks instead). */
  readonly quarantined: boolean | null;
  /** Runs `record` (the reference's statement) with what it settles besides (index-types.ts UploadCommit). */
  reference(storedVerified: boolean, setting: SettingGuard | null, record: (commit: UploadCommit) => Promise<void>): Promise<void>;
}

/**
 * Uploads on a cluster node, as retain must see them (NodeIndex explains sweeps): with a sweep open
 * each records itself in flight first and waits out another node's delete of its oid.
 */
export class ClusterUploads implements SweepWatcher {
  readonly node: ClusterNode;
  readonly #ledger: MaintenanceIndex;
  readonly #log: (msg: string, fields: object) => void;
  /** Until a heartbeat says no sweep is open, uploads record themselves: the safe side. */
  #recording = true;
  readonly #unrecorded = new Set<Upload>();

  private constructor(node: ClusterNode, ledger: MaintenanceIndex, log: (msg: string, fields: object) => void) {
    this.node = node;
    this.#ledger = ledger;
    this.#log = log;
  }

  static async start(node: ClusterNode, ledger: MaintenanceIndex, log: (msg: string, fields: object) => void): Promise<ClusterUploads> {
    const uploads = new ClusterUploads(node, ledger, log);
    node.watchSweeps(uploads);
    await node.beat();
    return uploads;
  }

  async run<T>(oid: Oid, write: (w: ClusterWrite) => Promise<T>): Promise<T> {
    const u: Upload = { oid, ticket: null, ended: false, done: false };
    let quarantined: boolean | null = null;
    let deletePending = false;
    if (this.#recording) {
      const begun = await this.#ledger.beginUpload(oid, this.node.id, Date.now());
      u.ticket = begun.ticket;
      quarantined = begun.quarantined;
      deletePending = begun.deletePending;
    } else {
      this.#unrecorded.add(u);
    }
    try {
      if (deletePending) await this.#awaitDelete(oid);
      return await write({
        quarantined,
        reference: async (storedVerified, setting, record) => {
          const ticket = u.ticket;
          await record({ storedVerified, ticket, ackedSweep: this.node.ackedSweep, setting });
          if (ticket !== null) u.ended = true;
        },
      });
    } finally {
      u.done = true;
      this.#unrecorded.delete(u);
      this.#end(u);
    }
  }

  async recordInFlight(): Promise<void> {
    this.#recording = true;
    const running = [...this.#unrecorded];
    this.#unrecorded.clear();
    const failures: unknown[] = [];
    await Promise.all(
      running.map(async (u) => {
        try {
          u.ticket = (await this.#ledger.beginUpload(u.oid, this.node.id, Date.now())).ticket;
          if (u.done) this.#end(u);
        } catch (e) {
          if (!u.done) this.#unrecorded.add(u);
          failures.push(e);
        }
      }),
    );
    // Not acknowledged: the next heartbeat tries again, and the sweep waits.
    if (failures.length > 0) throw failures[0];
  }

  sweepsClosed(): void {
    this.#recording = false;
  }

  /** Not on the response's path: a row left a moment longer only keeps retain off this oid. */
  #end(u: Upload): void {
    if (u.ticket === null || u.ended) return;
    u.ended = true;
    this.#ledger.endUpload(u.ticket).catch((e: unknown) => this.#log('upload in flight not cleared in the index', { level: 'warn', oid: u.oid, err: String(e) }));
  }

  /** Another node is deleting the oid: nothing announces the end across nodes, so the index is polled up to DELETE_WAIT_MS, then 503. */
  async #awaitDelete(oid: Oid): Promise<void> {
    const until = Date.now() + DELETE_WAIT_MS;
    while (await this.#ledger.deletePending(oid)) {
      if (Date.now() > until) throw lfsError('LFS_ERR_NOT_READY', 'This object is being deleted by a maintenance job on another node; retry shortly', { 'Retry-After': '5' });
      await sleep(DELETE_POLL_MS);
    }
  }
}

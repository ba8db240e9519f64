import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { NODE_HEARTBEAT_MS, NODE_STALE_MS, type NodeIndex } from '../db/index-types.js';

export interface SweepWatcher {
  /** A sweep this node has not acknowledged exists: record every upload now in flight, and each new one from now on. */
  recordInFlight(): Promise<void>;
  sweepsClosed(): void;
}

/** Nodes silent this long are forgotten (their rows, and the uploads they left in flight), on a start and daily after. */
const NODE_FORGOTTEN_MS = 7 * 24 * 3600_000;
const FORGET_EVERY_MS = 24 * 3600_000;

/** How often a retain asks whether every live node acknowledged its sweep (they do on their next heartbeat). */
const SWEEP_POLL_MS = 200;
/** A live node that has not acknowledged a sweep by then fails the retain (its heartbeats work, its acknowledgement does not). */
const SWEEP_ACK_WAIT_MS = 2 * NODE_STALE_MS;

/** This process as a node of a cluster: a random id and a heartbeat row that also acknowledges sweeps (NodeIndex). */
export class ClusterNode {
  /** Random per process start, so rows a dead predecessor left are never mistaken for ours. */
  readonly id = randomBytes(9).toString('base64url');
  readonly #nodes: NodeIndex;
  readonly #log: (msg: string, fields: object) => void;
  #timer: NodeJS.Timeout | null = null;
  #forgetTimer: NodeJS.Timeout | null = null;
  #failing = false;
  #acked = 0;
  #watcher: SweepWatcher | null = null;
  /** The heartbeat running now: beats never overlap (an acknowledgement must follow its recording). */
  #beating: Promise<void> = Promise.resolve();

  private constructor(nodes: NodeIndex, log: (msg: string, fields: object) => void) {
    this.#nodes = nodes;
    this.#log = log;
  }

  /** Writes the first heartbeat (live before taking any work), then one every NODE_HEARTBEAT_MS. */
  static async join(nodes: NodeIndex, log: (msg: string, fields: object) => void): Promise<ClusterNode> {
    const node = new ClusterNode(nodes, log);
    await node.beat();
    node.#timer = setInterval(() => void node.#timedBeat(), NODE_HEARTBEAT_MS);
    node.#timer.unref();
    node.#forgetTimer = setInterval(() => void node.#forgetSilent(), FORGET_EVERY_MS);
    node.#forgetTimer.unref();
    void node.#forgetSilent();
    return node;
  }

  async #forgetSilent(): Promise<void> {
    try {
      const n = await this.#nodes.forget(Date.now() - NODE_FORGOTTEN_MS);
      if (n > 0) this.#log('forgot nodes silent for a week', { nodes: n });
    } catch (e) {
      this.#log('forgetting silent nodes failed; tried again tomorrow', { level: 'warn', err: String(e) });
    }
  }

  liveSince(): number {
    return Date.now() - NODE_STALE_MS;
  }

  /** The newest sweep this node acknowledged: its uploads' references carry it (UploadCommit). */
  get ackedSweep(): number {
    return this.#acked;
  }

  watchSweeps(watcher: SweepWatcher): void {
    this.#watcher = watcher;
  }

  beat(): Promise<void> {
    const next = this.#beating.then(() => this.#beatOnce());
    this.#beating = next.catch(() => undefined);
    return next;
  }

  async #beatOnce(): Promise<void> {
    let state = await this.#nodes.heartbeat(this.id, Date.now(), this.#acked, this.liveSince());
    while (state.latest > this.#acked) {
      // Record first, acknowledge after: the sweep deletes nothing before every live node acknowledged it.
      const latest = state.latest;
      await this.#watcher?.recordInFlight();
      this.#acked = latest;
      state = await this.#nodes.heartbeat(this.id, Date.now(), this.#acked, this.liveSince());
    }
    if (!state.open) this.#watcher?.sweepsClosed();
  }

  async #timedBeat(): Promise<void> {
    try {
      await this.beat();
      if (this.#failing) this.#log('node heartbeat recovered', { node: this.id });
      this.#failing = false;
    } catch (e) {
      if (!this.#failing) this.#log('node heartbeat failed; other nodes take this one for dead after 30 s without one', { level: 'warn', node: this.id, err: String(e) });
      this.#failing = true;
    }
  }

  /** Runs a retain's deletions inside a sweep, only once every live node acknowledged it (after recording its uploads in flight). */
  async sweep<T>(run: () => Promise<T>, signal: AbortSignal): Promise<T> {
    const sweep = await this.#nodes.openSweep(this.id, Date.now());
    try {
      await this.beat();
      const until = Date.now() + SWEEP_ACK_WAIT_MS;
      for (;;) {
        const behind = await this.#nodes.startDeleting(sweep, this.liveSince());
        if (behind.length === 0) break;
        signal.throwIfAborted();
        if (Date.now() > until) throw new Error(`live nodes ${behind.join(', ')} did not acknowledge retain sweep ${sweep} within ${SWEEP_ACK_WAIT_MS / 1000} s; nothing was deleted`);
        await sleep(SWEEP_POLL_MS);
      }
      return await run();
    } finally {
      await this.#nodes.closeSweep(sweep, Date.now()).catch((e: unknown) => this.#log('retain sweep not closed; uploads keep recording themselves until it is', { level: 'warn', sweep, err: String(e) }));
    }
  }

  /** Leaves the cluster: a heartbeat of 0 frees this node's leases at once. */
  async leave(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    if (this.#forgetTimer !== null) clearInterval(this.#forgetTimer);
    this.#timer = null;
    this.#forgetTimer = null;
    await this.#beating;
    await this.#nodes.heartbeat(this.id, 0, this.#acked, this.liveSince()).catch(() => undefined);
  }
}

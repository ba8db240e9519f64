import { randomBytes } from 'node:crypto';
import { NODE_HEARTBEAT_MS, NODE_STALE_MS, type NodeIndex } from '../db/index-types.js';

/**
 * This process as one node of a cluster sharing a PostgreSQL index: a random id per start and a
 * heartbeat row the other nodes read. A node silent for NODE_STALE_MS is dead to them: its uploads
 * in flight no longer hold deletes back, its job leases are free, its running jobs interrupted.
 * Only used with a shared index; one node on SQLite needs none of it.
 */
export class ClusterNode {
  /** Random per process start, so rows a dead predecessor left are never mistaken for ours. */
  readonly id = randomBytes(9).toString('base64url');
  readonly #nodes: NodeIndex;
  readonly #log: (msg: string, fields: object) => void;
  #timer: NodeJS.Timeout | null = null;
  #failing = false;

  private constructor(nodes: NodeIndex, log: (msg: string, fields: object) => void) {
    this.#nodes = nodes;
    this.#log = log;
  }

  /** Writes the first heartbeat (so this node is live before it takes any work), then one every NODE_HEARTBEAT_MS. */
  static async join(nodes: NodeIndex, log: (msg: string, fields: object) => void): Promise<ClusterNode> {
    const node = new ClusterNode(nodes, log);
    await nodes.heartbeat(node.id, Date.now());
    node.#timer = setInterval(() => void node.#beat(), NODE_HEARTBEAT_MS);
    node.#timer.unref();
    return node;
  }

  /** Rows of nodes whose heartbeat is at or after this instant are live. */
  liveSince(): number {
    return Date.now() - NODE_STALE_MS;
  }

  async #beat(): Promise<void> {
    try {
      await this.#nodes.heartbeat(this.id, Date.now());
      if (this.#failing) this.#log('node heartbeat recovered', { node: this.id });
      this.#failing = false;
    } catch (e) {
      // Said once: a database outage fails every beat until it ends.
      if (!this.#failing) this.#log('node heartbeat failed; other nodes take this one for dead after 30 s without one', { level: 'warn', node: this.id, err: String(e) });
      this.#failing = true;
    }
  }

  /** Leaves the cluster: a heartbeat of 0 frees this node's leases at once (its work is drained by now). */
  async leave(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    await this.#nodes.heartbeat(this.id, 0).catch(() => undefined);
  }
}

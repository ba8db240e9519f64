import type { Statement } from 'better-sqlite3';
import { SWEEP_KEPT_MS } from '../index-rows.js';
import type { NodeIndex, SweepState } from '../index-types.js';
import type { Db } from './database.js';

/** Node heartbeats and retain sweeps in SQLite (one node in practice; the tables keep both indexes alike). */
export class NodesRepo implements NodeIndex {
  readonly #beat: Statement<[string, number, number]>;
  readonly #state: Statement<[number], { latest: number; open: number }>;
  readonly #open: (node: string, now: number) => number;
  readonly #start: (sweep: number, liveSince: number) => string[];
  readonly #close: Statement<[number, number]>;
  readonly #forget: (before: number) => number;

  constructor(db: Db) {
    this.#beat = db.prepare('INSERT INTO nodes (node, seen_at, acked_sweep) VALUES (?, ?, ?) ON CONFLICT (node) DO UPDATE SET seen_at = excluded.seen_at, acked_sweep = excluded.acked_sweep');
    this.#state = db.prepare(
      'SELECT COALESCE((SELECT max(sweep) FROM sweeps), 0) AS latest, ' +
        'EXISTS (SELECT 1 FROM sweeps s JOIN nodes n ON n.node = s.node WHERE s.closed_at IS NULL AND n.seen_at >= ?) AS open',
    );
    const prune = db.prepare<[number]>('DELETE FROM sweeps WHERE closed_at < ?');
    const insert = db.prepare<[string, number]>('INSERT INTO sweeps (node, opened_at) VALUES (?, ?)');
    const open = db.transaction((node: string, now: number) => {
      prune.run(now - SWEEP_KEPT_MS);
      return Number(insert.run(node, now).lastInsertRowid);
    });
    this.#open = (node, now) => open.immediate(node, now);
    const behind = db.prepare<[number, number], { node: string }>('SELECT node FROM nodes WHERE seen_at >= ? AND acked_sweep < ? ORDER BY node');
    const deleting = db.prepare<[number]>('UPDATE sweeps SET deleting = 1 WHERE sweep = ?');
    const start = db.transaction((sweep: number, liveSince: number) => {
      const late = behind.all(liveSince, sweep).map((r) => r.node);
      if (late.length === 0) deleting.run(sweep);
      return late;
    });
    this.#start = (sweep, liveSince) => start.immediate(sweep, liveSince);
    this.#close = db.prepare('UPDATE sweeps SET closed_at = ? WHERE sweep = ? AND closed_at IS NULL');
    const forgetUploads = db.prepare<[number]>('DELETE FROM uploads_in_flight WHERE node IN (SELECT node FROM nodes WHERE seen_at < ?)');
    const forgetNodes = db.prepare<[number]>('DELETE FROM nodes WHERE seen_at < ?');
    const forget = db.transaction((before: number) => {
      forgetUploads.run(before);
      return forgetNodes.run(before).changes;
    });
    this.#forget = (before) => forget.immediate(before);
  }

  async heartbeat(node: string, now: number, ackedSweep: number, liveSince: number): Promise<SweepState> {
    this.#beat.run(node, now, ackedSweep);
    const r = this.#state.get(liveSince)!;
    return { latest: r.latest, open: r.open === 1 };
  }

  async openSweep(node: string, now: number): Promise<number> {
    return this.#open(node, now);
  }

  async startDeleting(sweep: number, liveSince: number): Promise<string[]> {
    return this.#start(sweep, liveSince);
  }

  async forget(before: number): Promise<number> {
    return this.#forget(before);
  }

  async closeSweep(sweep: number, now: number): Promise<void> {
    this.#close.run(now, sweep);
  }
}

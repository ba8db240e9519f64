import { SWEEP_KEPT_MS } from '../index-rows.js';
import type { NodeIndex, SweepState } from '../index-types.js';
import type { Sql } from './pg-client.js';

/** Node heartbeats and retain sweeps on PostgreSQL (see NodeIndex). */
export class PgNodes implements NodeIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async heartbeat(node: string, now: number, ackedSweep: number, liveSince: number): Promise<SweepState> {
    const rows = await this.#sql<{ latest: number; open: boolean }[]>`
      WITH beat AS (
        INSERT INTO nodes (node, seen_at, acked_sweep) VALUES (${node}, ${now}::int8, ${ackedSweep}::int8)
        ON CONFLICT (node) DO UPDATE SET seen_at = excluded.seen_at, acked_sweep = excluded.acked_sweep
      )
      SELECT COALESCE((SELECT max(sweep) FROM sweeps), 0)::int8 AS latest,
        EXISTS (SELECT 1 FROM sweeps s JOIN nodes n ON n.node = s.node WHERE s.closed_at IS NULL AND n.seen_at >= ${liveSince}::int8) AS open`;
    return rows[0]!;
  }

  async openSweep(node: string, now: number): Promise<number> {
    const rows = await this.#sql<{ sweep: number }[]>`
      WITH pruned AS (DELETE FROM sweeps WHERE closed_at < ${now - SWEEP_KEPT_MS}::int8)
      INSERT INTO sweeps (node, opened_at) VALUES (${node}, ${now}::int8) RETURNING sweep`;
    return rows[0]!.sweep;
  }

  async startDeleting(sweep: number, liveSince: number): Promise<string[]> {
    const rows = await this.#sql<{ node: string }[]>`
      WITH behind AS (
        SELECT node FROM nodes WHERE seen_at >= ${liveSince}::int8 AND acked_sweep < ${sweep}::int8
      ), started AS (
        UPDATE sweeps SET deleting = true WHERE sweep = ${sweep}::int8 AND NOT EXISTS (SELECT 1 FROM behind)
      )
      SELECT node FROM behind ORDER BY node`;
    return rows.map((r) => r.node);
  }

  async forget(before: number): Promise<number> {
    const rows = await this.#sql<{ n: number }[]>`
      WITH gone AS (DELETE FROM nodes WHERE seen_at < ${before}::int8 RETURNING node),
      left_over AS (DELETE FROM uploads_in_flight u WHERE u.node IN (SELECT node FROM gone))
      SELECT count(*)::int8 AS n FROM gone`;
    return rows[0]!.n;
  }

  async closeSweep(sweep: number, now: number): Promise<void> {
    await this.#sql`UPDATE sweeps SET closed_at = ${now}::int8 WHERE sweep = ${sweep}::int8 AND closed_at IS NULL`;
  }
}

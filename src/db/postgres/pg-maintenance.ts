import type { Oid } from '../../protocol/oid.js';
import type { DropOutcome, MaintenanceIndex, RepoObjectRow } from '../index-types.js';
import type { Sql } from './pg-client.js';

/**
 * The index side of maintenance on PostgreSQL. dropReference and beginUpload are the two halves of
 * the upload/delete handshake: functions of migration 001 holding the oid's advisory lock, each
 * recording its own row, then looking for the other's, so at least one of them sees the other.
 */
export class PgMaintenance implements MaintenanceIndex {
  readonly #sql: Sql;
  #ending: { readonly ticket: number; readonly resolve: () => void; readonly reject: (e: unknown) => void }[] = [];

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async repoObjects(repo: string): Promise<RepoObjectRow[]> {
    const rows = await this.#sql<{ oid: string; size: number; stored_size: number; ref_at: number; obj_at: number; q: boolean }[]>`
      SELECT r.oid, o.size, o.stored_size, r.created_at AS ref_at, o.created_at AS obj_at, (q.oid IS NOT NULL) AS q
      FROM repo_objects r JOIN objects o ON o.oid = r.oid LEFT JOIN quarantine q ON q.oid = r.oid WHERE r.repo = ${repo} ORDER BY r.oid`;
    return rows.map((r) => ({ oid: r.oid as Oid, size: r.size, storedSize: r.stored_size, referencedAt: r.ref_at, createdAt: r.obj_at, quarantined: r.q }));
  }

  async referencedElsewhere(oid: Oid, repo: string): Promise<boolean> {
    const rows = await this.#sql<{ n: boolean }[]>`SELECT EXISTS (SELECT 1 FROM repo_objects WHERE oid = ${oid} AND repo <> ${repo}) AS n`;
    return rows[0]!.n;
  }

  async settleIntent(oid: Oid, liveSince: number): Promise<'stored' | 'in_flight' | 'delete'> {
    const rows = await this.#sql<{ outcome: 'stored' | 'in_flight' | 'delete' }[]>`SELECT stowage_settle_intent(${oid}, ${liveSince}::int8) AS outcome`;
    return rows[0]!.outcome;
  }

  async dropReference(repo: string, oid: Oid, liveSince: number, node: string): Promise<DropOutcome> {
    const rows = await this.#sql<{ outcome: DropOutcome }[]>`
      SELECT stowage_drop_reference(${repo}, ${oid}, ${liveSince}::int8, ${node}, ${Date.now()}::int8) AS outcome`;
    return rows[0]!.outcome;
  }

  async pendingDeletes(liveSince: number): Promise<Oid[]> {
    // A live node may still be deleting its own: only the intents of dead (or unknown) nodes are left over.
    const rows = await this.#sql<{ oid: string }[]>`
      SELECT oid FROM pending_deletes d WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node = d.node AND n.seen_at >= ${liveSince}::int8)`;
    return rows.map((r) => r.oid as Oid);
  }

  async deleted(oid: Oid): Promise<void> {
    await this.#sql`DELETE FROM pending_deletes WHERE oid = ${oid}`;
  }

  async quarantine(oid: Oid, repo: string, reason: string): Promise<void> {
    await this.#sql`INSERT INTO quarantine (oid, repo, reason, at) VALUES (${oid}, ${repo}, ${reason.slice(0, 500)}, ${Date.now()}::int8)
      ON CONFLICT (oid) DO NOTHING`;
  }

  async beginUpload(oid: Oid, node: string, now: number): Promise<{ readonly ticket: number; readonly deletePending: boolean; readonly quarantined: boolean }> {
    const rows = await this.#sql<{ ticket: number; delete_pending: boolean; quarantined: boolean }[]>`SELECT * FROM stowage_begin_upload(${oid}, ${node}, ${now}::int8)`;
    const r = rows[0]!;
    return { ticket: r.ticket, deletePending: r.delete_pending, quarantined: r.quarantined };
  }

  async deletePending(oid: Oid): Promise<boolean> {
    const rows = await this.#sql<{ n: boolean }[]>`SELECT EXISTS (SELECT 1 FROM pending_deletes WHERE oid = ${oid}) AS n`;
    return rows[0]!.n;
  }

  endUpload(ticket: number): Promise<void> {
    // Uploads ending in the same turn of the event loop share one statement, as their references do.
    return new Promise<void>((resolve, reject) => {
      this.#ending.push({ ticket, resolve, reject });
      if (this.#ending.length === 1) setImmediate(() => void this.#endAll());
    });
  }

  async #endAll(): Promise<void> {
    const ending = this.#ending;
    this.#ending = [];
    try {
      await this.#sql`DELETE FROM uploads_in_flight WHERE ticket = ANY(${ending.map((e) => e.ticket)}::int8[])`;
      for (const e of ending) e.resolve();
    } catch (err) {
      for (const e of ending) e.reject(err);
    }
  }
}

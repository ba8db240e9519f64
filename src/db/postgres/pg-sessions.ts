import type { SessionIndex, SessionRow } from '../index-types.js';
import { toSession, type RawSession } from '../index-rows.js';
import type { Sql } from './pg-client.js';

/** Dashboard sessions on PostgreSQL: a cookie signed in on one node works on every node. */
export class PgSessions implements SessionIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async insert(row: SessionRow): Promise<void> {
    await this.#sql`INSERT INTO sessions (id_hash, user_id, user_name, via, created_at, expires_at)
      VALUES (${row.idHash}, ${row.userId}, ${row.userName}, ${row.via}, ${row.createdAt}::int8, ${row.expiresAt}::int8)`;
  }

  async find(idHash: string, now: number): Promise<SessionRow | null> {
    const rows = await this.#sql<RawSession[]>`SELECT * FROM sessions WHERE id_hash = ${idHash} AND expires_at > ${now}::int8`;
    const r = rows[0];
    if (r === undefined) return null;
    return toSession(r);
  }

  async delete(idHash: string): Promise<boolean> {
    return (await this.#sql`DELETE FROM sessions WHERE id_hash = ${idHash}`).count > 0;
  }

  async purgeExpired(now: number): Promise<number> {
    return (await this.#sql`DELETE FROM sessions WHERE expires_at <= ${now}::int8`).count;
  }
}

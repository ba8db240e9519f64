import type { Oid } from '../../protocol/oid.js';
import type { ResumableIndex, ResumableRow } from '../index-types.js';
import type { Sql } from './pg-client.js';

interface Row {
  repo: string;
  oid: string;
  size: number;
  part_size: number;
  received: number;
  states: Buffer;
  holder: string | null;
  touched_at: number;
}

function toRow(r: Row): ResumableRow {
  return { repo: r.repo, oid: r.oid as Oid, size: Number(r.size), partSize: Number(r.part_size), received: Number(r.received), states: new Uint8Array(r.states), holder: r.holder, touchedAt: Number(r.touched_at) };
}

/** Partial resumable uploads on PostgreSQL (see ResumableIndex): each call one statement. */
export class PgResumable implements ResumableIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async announce(repo: string, oid: Oid, size: number, partSize: number, now: number): Promise<void> {
    await this.#sql`
      INSERT INTO resumable_uploads (repo, oid, size, part_size, touched_at) VALUES (${repo}, ${oid}, ${size}::int8, ${partSize}::int8, ${now}::int8)
      ON CONFLICT (repo, oid) DO UPDATE SET touched_at = excluded.touched_at`;
  }

  async get(repo: string, oid: Oid): Promise<ResumableRow | null> {
    const rows = await this.#sql<Row[]>`SELECT * FROM resumable_uploads WHERE repo = ${repo} AND oid = ${oid}`;
    return rows.length === 0 ? null : toRow(rows[0]!);
  }

  async claim(repo: string, oid: Oid, node: string, liveSince: number, now: number): Promise<boolean> {
    const rows = await this.#sql`
      UPDATE resumable_uploads SET holder = ${node}, touched_at = ${now}::int8
      WHERE repo = ${repo} AND oid = ${oid}
        AND (holder IS NULL OR holder = ${node} OR holder NOT IN (SELECT node FROM nodes WHERE seen_at >= ${liveSince}::int8))
      RETURNING 1`;
    return rows.length === 1;
  }

  async advance(repo: string, oid: Oid, node: string, received: number, states: Uint8Array, now: number): Promise<boolean> {
    const rows = await this.#sql`
      UPDATE resumable_uploads SET received = ${received}::int8, states = ${Buffer.from(states)}, touched_at = ${now}::int8
      WHERE repo = ${repo} AND oid = ${oid} AND holder = ${node} RETURNING 1`;
    return rows.length === 1;
  }

  async release(repo: string, oid: Oid, node: string): Promise<void> {
    await this.#sql`UPDATE resumable_uploads SET holder = NULL WHERE repo = ${repo} AND oid = ${oid} AND holder = ${node}`;
  }

  async remove(repo: string, oid: Oid): Promise<void> {
    await this.#sql`DELETE FROM resumable_uploads WHERE repo = ${repo} AND oid = ${oid}`;
  }

  async list(repo: string | null, idleBefore: number | null, liveSince: number): Promise<ResumableRow[]> {
    const rows = await this.#sql<Row[]>`
      SELECT * FROM resumable_uploads
      WHERE (${repo}::text IS NULL OR repo = ${repo}::text)
        AND (${idleBefore}::int8 IS NULL OR (touched_at < ${idleBefore}::int8
          AND (holder IS NULL OR holder NOT IN (SELECT node FROM nodes WHERE seen_at >= ${liveSince}::int8))))
      ORDER BY repo, oid`;
    return rows.map(toRow);
  }

  async figures(): Promise<{ count: number; bytes: number }> {
    const rows = await this.#sql<{ count: number; bytes: number }[]>`SELECT count(*)::int8 AS count, COALESCE(sum(received), 0)::int8 AS bytes FROM resumable_uploads`;
    return { count: Number(rows[0]!.count), bytes: Number(rows[0]!.bytes) };
  }
}

import type { DataKeyIndex, DataKeyRow } from '../index-types.js';
import type { Sql } from './pg-client.js';

interface RawDataKey {
  data_key_id: string;
  kek_id: string;
  wrapped: string;
}

const toRow = (r: RawDataKey): DataKeyRow => ({ dataKeyId: r.data_key_id, kekId: r.kek_id, wrapped: Buffer.from(r.wrapped, 'base64') });

/** Wrapped data keys on PostgreSQL: a key written on one node unwraps on every node holding the key ring. */
export class PgDataKeys implements DataKeyIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async putDataKey(row: DataKeyRow, createdAt = Date.now()): Promise<void> {
    await this.#sql`INSERT INTO data_keys (data_key_id, kek_id, wrapped, created_at) VALUES (${row.dataKeyId}, ${row.kekId}, ${row.wrapped.toString('base64')}, ${createdAt})`;
  }

  async getDataKey(dataKeyId: string): Promise<DataKeyRow | null> {
    const rows = await this.#sql<RawDataKey[]>`SELECT data_key_id, kek_id, wrapped FROM data_keys WHERE data_key_id = ${dataKeyId}`;
    return rows[0] === undefined ? null : toRow(rows[0]);
  }

  async dataKeysNotWrappedWith(kekId: string, after: string | null, limit: number): Promise<DataKeyRow[]> {
    // COLLATE "C": byte order, as SQLite's, so paging by dataKeyId means the same on both.
    const rows = await this.#sql<RawDataKey[]>`SELECT data_key_id, kek_id, wrapped FROM data_keys
      WHERE kek_id <> ${kekId} AND (${after}::text IS NULL OR data_key_id COLLATE "C" > ${after}::text)
      ORDER BY data_key_id COLLATE "C" LIMIT ${limit}`;
    return rows.map(toRow);
  }

  async rewrapDataKey(dataKeyId: string, fromKekId: string, toKekId: string, wrapped: Buffer): Promise<boolean> {
    const r = await this.#sql`UPDATE data_keys SET kek_id = ${toKekId}, wrapped = ${wrapped.toString('base64')}
      WHERE data_key_id = ${dataKeyId} AND kek_id = ${fromKekId}`;
    return r.count > 0;
  }

  async kekIdsInUse(): Promise<string[]> {
    const rows = await this.#sql<{ kek_id: string }[]>`SELECT kek_id FROM data_keys GROUP BY kek_id ORDER BY kek_id COLLATE "C"`;
    return rows.map((r) => r.kek_id);
  }

  async deleteDataKey(dataKeyId: string): Promise<void> {
    await this.#sql`DELETE FROM data_keys WHERE data_key_id = ${dataKeyId}`;
  }

  async dataKeyIdsWrittenBefore(before: number, after: string | null, limit: number): Promise<string[]> {
    const rows = await this.#sql<{ data_key_id: string }[]>`SELECT data_key_id FROM data_keys
      WHERE created_at < ${before} AND (${after}::text IS NULL OR data_key_id COLLATE "C" > ${after}::text)
      ORDER BY data_key_id COLLATE "C" LIMIT ${limit}`;
    return rows.map((r) => r.data_key_id);
  }

  async deleteDataKeysWrittenBefore(dataKeyIds: readonly string[], before: number): Promise<number> {
    if (dataKeyIds.length === 0) return 0;
    const r = await this.#sql`DELETE FROM data_keys WHERE data_key_id = ANY(${dataKeyIds as string[]}::text[]) AND created_at < ${before}`;
    return r.count;
  }
}

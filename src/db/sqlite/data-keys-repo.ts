import type { Statement } from 'better-sqlite3';
import type { DataKeyIndex, DataKeyRow } from '../index-types.js';
import type { Db } from './database.js';

interface RawDataKey {
  data_key_id: string;
  kek_id: string;
  wrapped: string;
}

const toRow = (r: RawDataKey): DataKeyRow => ({ dataKeyId: r.data_key_id, kekId: r.kek_id, wrapped: Buffer.from(r.wrapped, 'base64') });

/** Wrapped data keys in SQLite. Every statement prepared once, in the constructor. */
export class DataKeysRepo implements DataKeyIndex {
  readonly #put: Statement<[string, string, string, number]>;
  readonly #get: Statement<[string], RawDataKey>;
  readonly #notWrappedFirst: Statement<[string, number], RawDataKey>;
  readonly #notWrappedAfter: Statement<[string, string, number], RawDataKey>;
  readonly #rewrap: Statement<[string, string, string, string]>;
  readonly #inUse: Statement<[], { kek_id: string }>;
  readonly #delete: Statement<[string]>;
  readonly #writtenBeforeFirst: Statement<[number, number], { data_key_id: string }>;
  readonly #writtenBeforeAfter: Statement<[number, string, number], { data_key_id: string }>;
  readonly #deleteWrittenBefore: Statement<[string, number]>;

  constructor(db: Db) {
    this.#put = db.prepare('INSERT INTO data_keys (data_key_id, kek_id, wrapped, created_at) VALUES (?, ?, ?, ?)');
    this.#get = db.prepare('SELECT data_key_id, kek_id, wrapped FROM data_keys WHERE data_key_id = ?');
    this.#notWrappedFirst = db.prepare('SELECT data_key_id, kek_id, wrapped FROM data_keys WHERE kek_id <> ? ORDER BY data_key_id LIMIT ?');
    this.#notWrappedAfter = db.prepare('SELECT data_key_id, kek_id, wrapped FROM data_keys WHERE kek_id <> ? AND data_key_id > ? ORDER BY data_key_id LIMIT ?');
    this.#rewrap = db.prepare('UPDATE data_keys SET kek_id = ?, wrapped = ? WHERE data_key_id = ? AND kek_id = ?');
    this.#inUse = db.prepare('SELECT DISTINCT kek_id FROM data_keys ORDER BY kek_id');
    this.#delete = db.prepare('DELETE FROM data_keys WHERE data_key_id = ?');
    this.#writtenBeforeFirst = db.prepare('SELECT data_key_id FROM data_keys WHERE created_at < ? ORDER BY data_key_id LIMIT ?');
    this.#writtenBeforeAfter = db.prepare('SELECT data_key_id FROM data_keys WHERE created_at < ? AND data_key_id > ? ORDER BY data_key_id LIMIT ?');
    // The ids as one JSON array: one statement whatever their number.
    this.#deleteWrittenBefore = db.prepare('DELETE FROM data_keys WHERE data_key_id IN (SELECT value FROM json_each(?)) AND created_at < ?');
  }

  async putDataKey(row: DataKeyRow, createdAt = Date.now()): Promise<void> {
    this.#put.run(row.dataKeyId, row.kekId, row.wrapped.toString('base64'), createdAt);
  }

  async getDataKey(dataKeyId: string): Promise<DataKeyRow | null> {
    const r = this.#get.get(dataKeyId);
    return r === undefined ? null : toRow(r);
  }

  async dataKeysNotWrappedWith(kekId: string, after: string | null, limit: number): Promise<DataKeyRow[]> {
    const rows = after === null ? this.#notWrappedFirst.all(kekId, limit) : this.#notWrappedAfter.all(kekId, after, limit);
    return rows.map(toRow);
  }

  async rewrapDataKey(dataKeyId: string, fromKekId: string, toKekId: string, wrapped: Buffer): Promise<boolean> {
    return this.#rewrap.run(toKekId, wrapped.toString('base64'), dataKeyId, fromKekId).changes > 0;
  }

  async kekIdsInUse(): Promise<string[]> {
    return this.#inUse.all().map((r) => r.kek_id);
  }

  async deleteDataKey(dataKeyId: string): Promise<void> {
    this.#delete.run(dataKeyId);
  }

  async dataKeyIdsWrittenBefore(before: number, after: string | null, limit: number): Promise<string[]> {
    const rows = after === null ? this.#writtenBeforeFirst.all(before, limit) : this.#writtenBeforeAfter.all(before, after, limit);
    return rows.map((r) => r.data_key_id);
  }

  async deleteDataKeysWrittenBefore(dataKeyIds: readonly string[], before: number): Promise<number> {
    return dataKeyIds.length === 0 ? 0 : this.#deleteWrittenBefore.run(JSON.stringify(dataKeyIds), before).changes;
  }
}

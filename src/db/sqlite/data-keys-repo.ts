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
  readonly #put: Statement<[string, string, string]>;
  readonly #get: Statement<[string], RawDataKey>;
  readonly #notWrappedFirst: Statement<[string, number], RawDataKey>;
  readonly #notWrappedAfter: Statement<[string, string, number], RawDataKey>;
  readonly #rewrap: Statement<[string, string, string, string]>;
  readonly #inUse: Statement<[], { kek_id: string }>;
  readonly #delete: Statement<[string]>;

  constructor(db: Db) {
    this.#put = db.prepare('INSERT INTO data_keys (data_key_id, kek_id, wrapped) VALUES (?, ?, ?)');
    this.#get = db.prepare('SELECT data_key_id, kek_id, wrapped FROM data_keys WHERE data_key_id = ?');
    this.#notWrappedFirst = db.prepare('SELECT data_key_id, kek_id, wrapped FROM data_keys WHERE kek_id <> ? ORDER BY data_key_id LIMIT ?');
    this.#notWrappedAfter = db.prepare('SELECT data_key_id, kek_id, wrapped FROM data_keys WHERE kek_id <> ? AND data_key_id > ? ORDER BY data_key_id LIMIT ?');
    this.#rewrap = db.prepare('UPDATE data_keys SET kek_id = ?, wrapped = ? WHERE data_key_id = ? AND kek_id = ?');
    this.#inUse = db.prepare('SELECT DISTINCT kek_id FROM data_keys ORDER BY kek_id');
    this.#delete = db.prepare('DELETE FROM data_keys WHERE data_key_id = ?');
  }

  async putDataKey(row: DataKeyRow): Promise<void> {
    this.#put.run(row.dataKeyId, row.kekId, row.wrapped.toString('base64'));
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
}

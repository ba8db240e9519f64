import type { Statement } from 'better-sqlite3';
import type { SettingRow, SettingsIndex } from '../index-types.js';
import type { Db } from './database.js';

/** Saved settings, a JSON value per key. Every statement prepared once, in the constructor. */
export class SettingsRepo implements SettingsIndex {
  readonly #get: Statement<[string], { value: string; updated_at: number; updated_by: string }>;
  readonly #put: Statement<[string, string, number, string]>;
  readonly #delete: Statement<[string]>;
  readonly #insertNew: Statement<[string, string, number, string]>;

  constructor(db: Db) {
    this.#get = db.prepare('SELECT value, updated_at, updated_by FROM settings WHERE key = ?');
    this.#put = db.prepare(
      'INSERT INTO settings (key, value, updated_at, updated_by) VALUES (?, ?, ?, ?) ' +
        'ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, updated_by = excluded.updated_by',
    );
    this.#delete = db.prepare('DELETE FROM settings WHERE key = ?');
    this.#insertNew = db.prepare('INSERT INTO settings (key, value, updated_at, updated_by) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING');
  }

  async get(key: string): Promise<SettingRow | null> {
    const r = this.#get.get(key);
    if (r === undefined) return null;
    return { value: JSON.parse(r.value) as unknown, updatedAt: r.updated_at, updatedBy: r.updated_by };
  }

  async put(key: string, value: unknown, updatedBy: string, now: number): Promise<void> {
    this.#put.run(key, JSON.stringify(value), now, updatedBy);
  }

  async putIfAbsent(key: string, value: unknown, updatedBy: string, now: number): Promise<SettingRow> {
    this.#insertNew.run(key, JSON.stringify(value), now, updatedBy);
    return (await this.get(key))!;
  }

  async delete(key: string): Promise<void> {
    this.#delete.run(key);
  }
}

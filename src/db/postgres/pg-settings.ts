import type { SettingRow, SettingsIndex } from '../index-types.js';
import type { Sql } from './pg-client.js';

/** Saved settings on PostgreSQL (a JSON text per key): a setting saved on one node applies on all. */
export class PgSettings implements SettingsIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async get(key: string): Promise<SettingRow | null> {
    const rows = await this.#sql<{ value: string; updated_at: number; updated_by: string }[]>`
      SELECT value, updated_at, updated_by FROM settings WHERE key = ${key}`;
    const r = rows[0];
    return r === undefined ? null : { value: JSON.parse(r.value) as unknown, updatedAt: r.updated_at, updatedBy: r.updated_by };
  }

  async put(key: string, value: unknown, updatedBy: string, now: number): Promise<void> {
    await this.#sql`INSERT INTO settings (key, value, updated_at, updated_by) VALUES (${key}, ${JSON.stringify(value)}, ${now}::int8, ${updatedBy})
      ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, updated_by = excluded.updated_by`;
  }

  async putIfAbsent(key: string, value: unknown, updatedBy: string, now: number): Promise<SettingRow> {
    // DO UPDATE (changing nothing) rather than DO NOTHING: it waits for a racing insert to commit
    // and returns the row as it then is, so every racing caller gets the first one's value.
    const rows = await this.#sql<{ value: string; updated_at: number; updated_by: string }[]>`
      INSERT INTO settings AS s (key, value, updated_at, updated_by) VALUES (${key}, ${JSON.stringify(value)}, ${now}::int8, ${updatedBy})
      ON CONFLICT (key) DO UPDATE SET value = s.value RETURNING s.value, s.updated_at, s.updated_by`;
    const r = rows[0]!;
    return { value: JSON.parse(r.value) as unknown, updatedAt: r.updated_at, updatedBy: r.updated_by };
  }

  async delete(key: string): Promise<void> {
    await this.#sql`DELETE FROM settings WHERE key = ${key}`;
  }
}

import Database from 'better-sqlite3';
import { tableSpec, type CopiedTable, type IndexTables, type TableRow } from '../index-tables.js';
import { openDatabase, type Db } from './database.js';

/** A key comparison as a row value: `(a, b) > (?, ?)` (SQLite 3.15+), so composite keys page exactly. */
function after(key: readonly string[]): string {
  return `(${key.join(', ')}) > (${key.map(() => '?').join(', ')})`;
}

/**
 * Table-level access to the SQLite index (index-tables.ts): a migration source is opened read-only,
 * a target as the server opens it. Table and column names come from COPIED_TABLES only.
 */
export class SqliteTables implements IndexTables {
  readonly kind = 'sqlite' as const;
  readonly #db: Db;

  private constructor(db: Db) {
    this.#db = db;
  }

  /** Opens `file`: read-only (it must exist and be migrated already), or writable as the server opens it. */
  static open(file: string, mode: 'readonly' | 'writable'): SqliteTables {
    if (mode === 'writable') return new SqliteTables(openDatabase(file));
    const db = new Database(file, { readonly: true, fileMustExist: true });
    db.pragma('busy_timeout = 5000');
    return new SqliteTables(db);
  }

  async read(table: CopiedTable, from: TableRow | null, limit: number): Promise<TableRow[]> {
    const spec = tableSpec(table);
    const where = from === null ? '' : `WHERE ${after(spec.key)}`;
    const stmt = this.#db.prepare(`SELECT ${spec.columns.join(', ')} FROM ${spec.name} ${where} ORDER BY ${spec.key.join(', ')} LIMIT ?`);
    const args = from === null ? [limit] : [...spec.key.map((k) => from[k] ?? null), limit];
    return stmt.all(...args) as TableRow[];
  }

  async write(table: CopiedTable, rows: readonly TableRow[]): Promise<number> {
    const spec = tableSpec(table);
    const insert = this.#db.prepare(`INSERT INTO ${spec.name} (${spec.columns.join(', ')}) VALUES (${spec.columns.map(() => '?').join(', ')}) ON CONFLICT DO NOTHING`);
    // One transaction per page; AUTOINCREMENT keeps sqlite_sequence at the largest seq inserted.
    return this.#db.transaction(() => rows.reduce((n, r) => n + insert.run(...spec.columns.map((c) => r[c] ?? null)).changes, 0))();
  }

  async rewrite(table: CopiedTable, rows: readonly TableRow[]): Promise<void> {
    const spec = tableSpec(table);
    const cols = spec.rewritten ?? [];
    if (cols.length === 0 || rows.length === 0) return;
    const update = this.#db.prepare(`UPDATE ${spec.name} SET ${cols.map((c) => `${c} = ?`).join(', ')} WHERE ${spec.key.map((k) => `${k} = ?`).join(' AND ')}`);
    this.#db.transaction(() => {
      for (const r of rows) update.run(...cols.map((c) => r[c] ?? null), ...spec.key.map((k) => r[k] ?? null));
    })();
  }

  async count(table: CopiedTable): Promise<number> {
    return (this.#db.prepare(`SELECT count(*) AS n FROM ${tableSpec(table).name}`).get() as { n: number }).n;
  }

  async columns(table: string): Promise<string[]> {
    return (this.#db.prepare('SELECT name FROM pragma_table_info(?)').all(table) as { name: string }[]).map((r) => r.name);
  }

  async tables(): Promise<string[]> {
    const rows = this.#db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").all() as { name: string }[];
    return rows.map((r) => r.name);
  }

  async sequenceHighWater(table: CopiedTable): Promise<number> {
    const spec = tableSpec(table);
    if (spec.sequence === undefined) return 0;
    // AUTOINCREMENT remembers the largest seq ever used, also when that lock is gone.
    const kept = this.#db.prepare('SELECT seq FROM sqlite_sequence WHERE name = ?').get(spec.name) as { seq: number } | undefined;
    const max = (this.#db.prepare(`SELECT coalesce(max(${spec.sequence}), 0) AS m FROM ${spec.name}`).get() as { m: number }).m;
    return Math.max(kept?.seq ?? 0, max);
  }

  async raiseSequence(table: CopiedTable, value: number): Promise<void> {
    const spec = tableSpec(table);
    if (spec.sequence === undefined) return;
    this.#db.transaction(() => {
      const changed = this.#db.prepare('UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?').run(value, spec.name).changes;
      if (changed === 0) this.#db.prepare('INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)').run(spec.name, value);
    })();
  }

  async close(): Promise<void> {
    this.#db.close();
  }
}

import { tableSpec, type CopiedTable, type IndexTables, type TableRow } from '../index-tables.js';
import { migrate } from './migrate.js';
import { connect, type Sql } from './pg-client.js';

/** Bookkeeping of the migrations, not index content. */
const SCHEMA_TABLE = 'schema_version';

/**
 * Table-level access to the PostgreSQL index (index-tables.ts): a page of rows per statement (one
 * JSON parameter, json_populate_recordset). Table and column names come from COPIED_TABLES only.
 */
export class PostgresTables implements IndexTables {
  readonly kind = 'postgres' as const;
  readonly #sql: Sql;

  private constructor(sql: Sql) {
    this.#sql = sql;
  }

  /**
   * Connects to `url`; with `migrateFirst` brings the schema up to date under the nodes' lock. Without
   * it (a dry run) nothing is written (see hasSchema).
   */
  static async open(url: string, migrateFirst: boolean): Promise<PostgresTables> {
    // No per-call deadline: a page copy may take long; connecting is bounded all the same.
    const { sql } = connect(url);
    try {
      if (migrateFirst) await migrate(sql);
      else await sql`SELECT 1`;
    } catch (e) {
      await sql.end({ timeout: 0 });
      throw e;
    }
    return new PostgresTables(sql);
  }

  async hasSchema(): Promise<boolean> {
    return (await this.tables()).length > 0;
  }

  /** Nodes whose heartbeat is at or after `since`: a cluster already running on this database. */
  async liveNodes(since: number): Promise<number> {
    if (!(await this.tables()).includes('nodes')) return 0;
    const rows = await this.#sql<{ n: number }[]>`SELECT count(*)::int8 AS n FROM nodes WHERE seen_at >= ${since}::int8`;
    return rows[0]!.n;
  }

  async read(table: CopiedTable, from: TableRow | null, limit: number): Promise<TableRow[]> {
    const spec = tableSpec(table);
    const cols = spec.columns.join(', ');
    const order = spec.key.join(', ');
    if (from === null) return (await this.#sql.unsafe(`SELECT ${cols} FROM ${spec.name} ORDER BY ${order} LIMIT $1`, [limit], { prepare: true })) as unknown as TableRow[];
    // A row-value comparison pages a composite key exactly, in the same (column collation) order as ORDER BY.
    const key = `(${order}) > (${spec.key.map((_, i) => `$${i + 1}`).join(', ')})`;
    const args = [...spec.key.map((k) => from[k] ?? null), limit];
    return (await this.#sql.unsafe(`SELECT ${cols} FROM ${spec.name} WHERE ${key} ORDER BY ${order} LIMIT $${args.length}`, args, { prepare: true })) as unknown as TableRow[];
  }

  async write(table: CopiedTable, rows: readonly TableRow[]): Promise<number> {
    if (rows.length === 0) return 0;
    const spec = tableSpec(table);
    const cols = spec.columns.join(', ');
    // An identity column is GENERATED ALWAYS: the copied values are kept on purpose (lock cursors).
    const overriding = spec.sequence === undefined ? '' : 'OVERRIDING SYSTEM VALUE';
    const result = await this.#sql.unsafe(
      `INSERT INTO ${spec.name} (${cols}) ${overriding} SELECT ${cols} FROM json_populate_recordset(NULL::${spec.name}, $1::text::json) ON CONFLICT DO NOTHING`,
      [JSON.stringify(rows.map((r) => Object.fromEntries(spec.columns.map((c) => [c, r[c] ?? null]))))],
      { prepare: true },
    );
    if (spec.sequence !== undefined) await this.raiseSequence(table, Math.max(...rows.map((r) => Number(r[spec.sequence!]))));
    return result.count;
  }

  async rewrite(table: CopiedTable, rows: readonly TableRow[]): Promise<void> {
    const spec = tableSpec(table);
    const cols = spec.rewritten ?? [];
    if (cols.length === 0 || rows.length === 0) return;
    await this.#sql.unsafe(
      `UPDATE ${spec.name} t SET ${cols.map((c) => `${c} = j.${c}`).join(', ')} FROM json_populate_recordset(NULL::${spec.name}, $1::text::json) j WHERE ${spec.key.map((k) => `t.${k} = j.${k}`).join(' AND ')}`,
      [JSON.stringify(rows.map((r) => Object.fromEntries([...spec.key, ...cols].map((c) => [c, r[c] ?? null]))))],
      { prepare: true },
    );
  }

  async count(table: CopiedTable): Promise<number> {
    const rows = await this.#sql.unsafe(`SELECT count(*)::int8 AS n FROM ${tableSpec(table).name}`);
    return Number((rows[0] as unknown as { n: number }).n);
  }

  async columns(table: string): Promise<string[]> {
    const rows = await this.#sql<{ column_name: string }[]>`
      SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ${table} ORDER BY ordinal_position`;
    return rows.map((r) => r.column_name);
  }

  async tables(): Promise<string[]> {
    const rows = await this.#sql<{ table_name: string }[]>`
      SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> ${SCHEMA_TABLE}`;
    return rows.map((r) => r.table_name);
  }

  async sequenceHighWater(table: CopiedTable): Promise<number> {
    const spec = tableSpec(table);
    if (spec.sequence === undefined) return 0;
    // The identity's last value survives deletes, as SQLite's sqlite_sequence does.
    const rows = await this.#sql.unsafe(
      `SELECT greatest(
         (SELECT coalesce(s.last_value, 0) FROM pg_sequences s WHERE format('%I.%I', s.schemaname, s.sequencename) = pg_get_serial_sequence($1, $2)),
         (SELECT coalesce(max(${spec.sequence}), 0) FROM ${spec.name}))::int8 AS hw`,
      [spec.name, spec.sequence],
    );
    return Number((rows[0] as unknown as { hw: number | null }).hw ?? 0);
  }

  async raiseSequence(table: CopiedTable, value: number): Promise<void> {
    const spec = tableSpec(table);
    if (spec.sequence === undefined) return;
    const target = Math.max(value, await this.sequenceHighWater(table));
    // setval(…, v, true): the next identity is v + 1. Its minimum is 1: an empty table has nothing to continue.
    if (target < 1) return;
    await this.#sql.unsafe('SELECT setval(pg_get_serial_sequence($1, $2), $3::int8, true)', [spec.name, spec.sequence, target]);
  }

  async close(): Promise<void> {
    await this.#sql.end({ timeout: 5 });
  }
}

import { createHash } from 'node:crypto';

/**
 * Table-level access for `stowage migrate`: both implementations hold the same tables and column
 * names, so a row read from one is written to the other as it is.
 */

/** One row as both sides hold it: integers (sizes, ms timestamps, 0/1 flags) as numbers, text (JSON included) as strings. */
export type TableRow = Readonly<Record<string, string | number | null>>;

export interface TableSpec {
  readonly name: CopiedTable;
  /** The primary key, in order: what pages are read by (`read`'s `after`). */
  readonly key: readonly string[];
  readonly columns: readonly string[];
  /**
   * Columns the digest leaves out because the copy of the store rewrites them: an object's
   * stored_size is the bucket's (compressed as SVC_COMPRESSION says there), not the disk's.
   */
  readonly rewritten?: readonly string[];
  /** The identity / autoincrement column whose counter must continue after the copied values. */
  readonly sequence?: string;
  /** Columns of the schema deliberately left behind, each with the reason. */
  readonly notCopied?: Readonly<Record<string, string>>;
}

export type CopiedTable =
  | 'objects'
  | 'repo_objects'
  | 'locks'
  | 'sessions'
  | 'settings'
  | 'jobs'
  | 'quarantine'
  | 'pending_deletes'
  | 'repo_audits'
  | 'stats_samples'
  | 'data_keys';

/**
 * What an operator would miss after the move, in copy order (objects before the references that
 * point at them). Runtime state of the running nodes is not copied: nodes (heartbeats),
 * job_leases, uploads_in_flight and sweeps describe processes that are stopped, and each new node
 * writes its own; resumable_uploads are partial uploads, which a client sends again after the move.
 */
export const COPIED_TABLES: readonly TableSpec[] = [
  { name: 'objects', key: ['oid'], columns: ['oid', 'size', 'stored_size', 'created_at'], rewritten: ['stored_size'] },
  { name: 'repo_objects', key: ['repo', 'oid'], columns: ['repo', 'oid', 'created_at'] },
  // seq is kept: lock list cursors handed to clients before the move stay exact after it.
  { name: 'locks', key: ['seq'], columns: ['seq', 'id', 'repo', 'path', 'ref', 'owner_id', 'owner_name', 'locked_at'], sequence: 'seq' },
  { name: 'sessions', key: ['id_hash'], columns: ['id_hash', 'user_id', 'user_name', 'via', 'created_at', 'expires_at'] },
  { name: 'settings', key: ['key'], columns: ['key', 'value', 'updated_at', 'updated_by'] },
  {
    name: 'jobs',
    key: ['id'],
    columns: ['id', 'kind', 'repo', 'state', 'dry_run', 'objects_done', 'objects_total', 'bytes_done', 'bytes_total', 'report', 'error', 'started_at', 'finished_at', 'node'],
  },
  { name: 'quarantine', key: ['oid'], columns: ['oid', 'repo', 'reason', 'at'] },
  {
    name: 'pending_deletes',
    key: ['oid'],
    columns: ['oid', 'at'],
    notCopied: { node: 'the process that was deleting is gone either way: an intent without a live node is finished by the next retain' },
  },
  { name: 'repo_audits', key: ['repo'], columns: ['repo', 'finished_at', 'objects', 'bytes', 'corrupt', 'unreadable', 'complete'] },
  {
    name: 'stats_samples',
    key: ['at'],
    columns: ['at', 'repositories', 'objects', 'logical_bytes', 'stored_bytes', 'uploads', 'upload_bytes', 'downloads', 'download_bytes', 'rejections'],
  },
  // Without its wrapped data key an encrypted object cannot be read: the rows go with the objects.
  { name: 'data_keys', key: ['data_key_id'], columns: ['data_key_id', 'kek_id', 'wrapped', 'created_at'] },
];

/** Tables of the schema that are deliberately not copied (see COPIED_TABLES). */
export const RUNTIME_TABLES: readonly string[] = ['nodes', 'job_leases', 'uploads_in_flight', 'sweeps', 'resumable_uploads'];

export function tableSpec(name: CopiedTable): TableSpec {
  const spec = COPIED_TABLES.find((s) => s.name === name);
  if (spec === undefined) throw new Error(`not a copied table: ${name}`);
  return spec;
}

export interface IndexTables {
  readonly kind: 'sqlite' | 'postgres';
  /** Up to `limit` rows whose key comes after `after` (null: from the first), in key order. */
  read(table: CopiedTable, after: TableRow | null, limit: number): Promise<TableRow[]>;
  /** Inserts rows whose key is new ("do nothing on conflict"), so a rerun adds only what is missing. */
  write(table: CopiedTable, rows: readonly TableRow[]): Promise<number>;
  /** Sets the spec's `rewritten` columns of rows the table holds (matched by key). */
  rewrite(table: CopiedTable, rows: readonly TableRow[]): Promise<void>;
  count(table: CopiedTable): Promise<number>;
  /** The column names the table has here, for checking that COPIED_TABLES covers the schema. */
  columns(table: string): Promise<string[]>;
  /** The tables the schema has here (migration bookkeeping left out). */
  tables(): Promise<string[]>;
  /** The largest value the sequence column ever took, deleted rows included, or 0. */
  sequenceHighWater(table: CopiedTable): Promise<number>;
  /** Makes the sequence column continue after `value` (never moves it back). */
  raiseSequence(table: CopiedTable, value: number): Promise<void>;
  close(): Promise<void>;
}

/** Rows read per page: a few hundred KiB of rows, one round trip each. */
export const PAGE_ROWS = 2000;

export interface TableDigest {
  readonly rows: number;
  readonly digest: string;
}

const MOD = 1n << 256n;

/**
 * The sum, modulo 2^256, of each row's sha256 (columns in spec order, as JSON; `rewritten` left
 * out). A sum, not a hash in key order: PostgreSQL sorts text by collation, SQLite bytewise.
 */
export async function tableDigest(tables: IndexTables, spec: TableSpec): Promise<TableDigest> {
  const skip = new Set(spec.rewritten ?? []);
  const cols = spec.columns.filter((c) => !skip.has(c));
  let sum = 0n;
  let rows = 0;
  for await (const page of pages(tables, spec.name)) {
    for (const row of page) {
      const h = createHash('sha256').update(JSON.stringify(cols.map((c) => row[c] ?? null))).digest('hex');
      sum = (sum + BigInt(`0x${h}`)) % MOD;
      rows++;
    }
  }
  return { rows, digest: sum.toString(16).padStart(64, '0') };
}

export async function* pages(tables: IndexTables, table: CopiedTable, size = PAGE_ROWS): AsyncIterable<TableRow[]> {
  let after: TableRow | null = null;
  for (;;) {
    const page = await tables.read(table, after, size);
    if (page.length === 0) return;
    yield page;
    if (page.length < size) return;
    after = page[page.length - 1]!;
  }
}

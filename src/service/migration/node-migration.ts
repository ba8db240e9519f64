import { existsSync, readdirSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { redactDatabaseUrl } from '../../config/load.js';
import type { S3Config } from '../../config/schema.js';
import { DataDirLock } from '../../db/data-dir-lock.js';
import { NODE_STALE_MS } from '../../db/index-types.js';
import { COPIED_TABLES, pages, RUNTIME_TABLES, tableDigest, type IndexTables, type TableRow, type TableSpec } from '../../db/index-tables.js';
import { PostgresTables } from '../../db/postgres/postgres-tables.js';
import { openSqliteIndex } from '../../db/sqlite/sqlite-index.js';
import { SqliteTables } from '../../db/sqlite/sqlite-tables.js';
import { isLfsError } from '../../errors/errors.js';
import type { Oid } from '../../protocol/oid.js';
import { composeStore, readingStore } from '../../store/compose.js';
import { DiskBlobStore } from '../../store/disk.js';
import { S3BlobStore } from '../../store/s3/s3-store.js';
import type { BlobStore } from '../../store/types.js';
import { HashThread } from '../../workers/hash-thread.js';
import { WorkerPool } from '../../workers/pool.js';
import { pumpInto, withObjectPull } from '../maintenance/object-io.js';
import { forEachLimited } from '../maintenance/worker-tasks.js';
import { indexReferenceLog } from './index-reference-log.js';

/** What a migration is told: the single node's data directory and where its content goes. */
export interface MigrationOptions {
  /** SVC_DATA_DIR of the stopped server: index.sqlite, journal/, objects/. */
  readonly dataDir: string;
  /** postgres://… of the target index. */
  readonly targetUrl: string;
  /** The bucket (SVC_STORE=s3, SVC_S3_*) to copy the objects into; null: the index only. */
  readonly bucket: S3Config | null;
  /** SVC_COMPRESSION of the target: objects are written through the same stack a node uses. */
  readonly compressionLevel: number | null;
  readonly workers: number;
  readonly directIo: boolean;
  /** Report what would be copied; write nothing anywhere. */
  readonly dryRun: boolean;
  /** One line of progress (stderr). */
  readonly progress: (line: string) => void;
}

/** One table's figures. */
export interface TableReport {
  readonly table: string;
  readonly source_rows: number;
  /** Rows this run added (a rerun adds only what is missing). */
  readonly copied: number;
  readonly target_rows: number;
  /** Counts and content digests equal on both sides (null in a dry run). */
  readonly verified: boolean | null;
}

/** The store's figures (with --objects). */
export interface ObjectsReport {
  readonly total: number;
  readonly copied: number;
  readonly bytes_copied: number;
  /** Already in the bucket at the right size (an earlier run's): skipped. */
  readonly already_in_bucket: number;
  /** Quarantined objects: their bytes were set aside, so there is nothing to copy. */
  readonly quarantined: number;
  /** In the index but not on disk. */
  readonly missing_on_disk: string[];
  /** On disk, but the bytes do not hash to their oid or have the wrong size. */
  readonly refused: { oid: string; reason: string }[];
  /** After the copy, not in the bucket at the stored size the target index records. */
  readonly absent_from_bucket: string[];
}

/** What `stowage migrate` prints (--json) and decides its exit status from. */
export interface MigrationReport {
  readonly target: string;
  readonly dry_run: boolean;
  readonly journal: { readonly replayed: number; readonly segments_retired: number; readonly segments_pending: number };
  readonly tables: TableReport[];
  readonly objects: ObjectsReport | null;
  /** Everything that keeps the copy from being verified, one line each. */
  readonly problems: string[];
  /** True when every table and (with --objects) every object was checked equal on the target. */
  readonly verified: boolean;
}

/** Objects copied at once: each waits mostly on the bucket's round trips. */
const OBJECT_LANES = 4;
/** Journal segment names (store/journal.ts). */
const SEGMENT = /^seg-\d{12}\.log$/;

/**
 * Moves a stopped single node (SQLite index + disk store) to PostgreSQL (+ an S3 bucket when one is
 * configured): takes the data directory's lock as the server does, replays the journal into the
 * index and writes its small objects out, copies every table (objects with their bytes first when a
 * bucket is given), then verifies. Every step is safe to run again: rows already in the target and
 * objects already in the bucket are left as they are.
 */
export async function migrateNode(o: MigrationOptions): Promise<MigrationReport> {
  const indexFile = join(o.dataDir, 'index.sqlite');
  if (!existsSync(indexFile)) throw new MigrationRefused(`no index at ${indexFile}: SVC_DATA_DIR must be the data directory of the server being moved`);
  // The server's own lock: a running server (or a second migrate) is refused, never raced.
  const lock = DataDirLock.acquire(o.dataDir);
  const pool = new WorkerPool(o.workers);
  const hasher = new HashThread();
  const closing: (() => Promise<unknown>)[] = [];
  try {
    const disk = await DiskBlobStore.open(o.dataDir, { directIo: o.directIo });
    const journal = o.dryRun ? { replayed: 0, segments_retired: 0, segments_pending: pendingSegments(o.dataDir) } : await replayJournal(o, indexFile, disk, pool, hasher);
    if (journal.replayed > 0 || journal.segments_retired > 0) o.progress(`journal: ${journal.replayed} references replayed, ${journal.segments_retired} segments written out`);

    const source = SqliteTables.open(indexFile, 'readonly');
    closing.push(() => source.close());
    const target = await PostgresTables.open(o.targetUrl, !o.dryRun).catch((e: unknown) => {
      throw new Error(`the database ${redactDatabaseUrl(o.targetUrl)} cannot be used: ${(e as Error).message}`, { cause: e });
    });
    closing.push(() => target.close());
    // Copying under a running cluster would mix its writes into what is being verified.
    const live = await target.liveNodes(Date.now() - NODE_STALE_MS);
    if (live > 0) throw new MigrationRefused(`${live} Stowage node(s) are running on ${redactDatabaseUrl(o.targetUrl)}: stop them first (the migration fills a database no node uses yet)`);
    const legacy = await legacyRepositories(o.dataDir);
    const problems = await schemaProblems(source, target);
    if (problems.length > 0) throw new MigrationRefused(`the schemas differ from what this version copies:\n  ${problems.join('\n  ')}`);

    let bucket: { store: BlobStore; raw: S3BlobStore } | null = null;
    if (o.bucket !== null) {
      const raw = await S3BlobStore.open(o.bucket);
      closing.push(() => raw.close());
      const { store } = await composeStore({ backend: raw, codec: pool, hasher, compressionLevel: o.compressionLevel, journal: null });
      bucket = { store, raw };
    }
    const copy = new TableCopy(source, target, o.progress);
    const objects = bucket === null ? null : new ObjectCopy(readingStore(disk, pool), bucket.store, o.progress);
    const tables: TableReport[] = [];
    for (const spec of COPIED_TABLES) {
      const sourceRows = await source.count(spec.name);
      let copied = 0;
      if (!o.dryRun) {
        copied = spec.name === 'objects' && objects !== null ? await objects.run(source, target, sourceRows) : await copy.run(spec, sourceRows);
        if (spec.sequence !== undefined) await target.raiseSequence(spec.name, await source.sequenceHighWater(spec.name));
      }
      tables.push({ table: spec.name, source_rows: sourceRows, copied, target_rows: (await target.hasSchema()) ? await target.count(spec.name) : 0, verified: null });
    }
    if (o.dryRun) {
      const report = objects === null ? null : await objects.survey(source);
      const notes = legacy.map((r) => `${r}: objects in the legacy folder repos/${r} are not in the index (stowage dedupe ${r} first)`);
      return { target: redactDatabaseUrl(o.targetUrl), dry_run: true, journal, tables, objects: report, problems: notes, verified: false };
    }

    o.progress('verifying: table digests');
    const checked: TableReport[] = [];
    // Legacy per-repository files are served from the disk only and are in no table: they would be lost.
    const found: string[] = legacy.map((r) => `${r}: objects in the legacy folder repos/${r} are not in the index (stowage dedupe ${r}, then run again)`);
    for (const t of tables) {
      const spec = COPIED_TABLES.find((s) => s.name === t.table)!;
      const [a, b] = await Promise.all([tableDigest(source, spec), tableDigest(target, spec)]);
      const same = a.rows === b.rows && a.digest === b.digest;
      if (!same) found.push(`table ${t.table}: ${a.rows} rows here, ${b.rows} in the target${a.rows === b.rows ? ', with different content' : ''}`);
      checked.push({ ...t, target_rows: b.rows, verified: same });
    }
    let objectReport: ObjectsReport | null = null;
    if (objects !== null && bucket !== null) {
      o.progress('verifying: every object in the bucket');
      objectReport = await objects.verify(target, bucket.raw);
      if (objectReport.missing_on_disk.length > 0) found.push(`${objectReport.missing_on_disk.length} objects in the index are not on disk (copied as references only)`);
      if (objectReport.refused.length > 0) found.push(`${objectReport.refused.length} objects on disk do not match their oid (not copied)`);
      if (objectReport.absent_from_bucket.length > 0) found.push(`${objectReport.absent_from_bucket.length} objects are not in the bucket at the size the index records`);
    }
    return { target: redactDatabaseUrl(o.targetUrl), dry_run: false, journal, tables: checked, objects: objectReport, problems: found, verified: found.length === 0 };
  } finally {
    for (const close of closing.reverse()) await close().catch(() => undefined);
    await pool.close();
    await hasher.close();
    lock.release();
  }
}

/** The migration cannot start as asked (the CLI exits 2 with the message). */
export class MigrationRefused extends Error {
  override readonly name = 'MigrationRefused';
}

/** An object file name in a legacy folder (`ab/cd/<oid>`); set-aside files (`<oid>.refused`) are not objects. */
const LEGACY_OBJECT = /^[0-9a-f]{64}$/;

/** Repositories (`org/repo`) whose legacy folder under repos/ still holds object files dedupe has not folded. */
async function legacyRepositories(dataDir: string): Promise<string[]> {
  const names = async (dir: string): Promise<string[]> => readdir(dir).catch(() => []);
  const holdsObjects = async (dir: string, depth: number): Promise<boolean> => {
    for (const n of await names(dir)) {
      if (depth === 0 ? LEGACY_OBJECT.test(n) : await holdsObjects(join(dir, n), depth - 1)) return true;
    }
    return false;
  };
  const out: string[] = [];
  const root = join(dataDir, 'repos');
  for (const org of await names(root)) {
    for (const repo of await names(join(root, org))) if (await holdsObjects(join(root, org, repo), 2)) out.push(`${org}/${repo}`);
  }
  return out;
}

function pendingSegments(dataDir: string): number {
  const dir = join(dataDir, 'journal');
  return existsSync(dir) ? readdirSync(dir).filter((n) => SEGMENT.test(n)).length : 0;
}

/**
 * Opens the disk stack with its journal as the server does at start: replay restores every
 * acknowledged reference into index.sqlite, and retirement writes the journal's small objects to
 * their own files, so the copy below finds every object in the index and on disk.
 */
async function replayJournal(o: MigrationOptions, indexFile: string, disk: DiskBlobStore, pool: WorkerPool, hasher: HashThread): Promise<MigrationReport['journal']> {
  const index = openSqliteIndex(indexFile);
  try {
    const { journal } = await composeStore({
      backend: disk,
      codec: pool,
      hasher,
      compressionLevel: o.compressionLevel,
      journal: { dir: join(o.dataDir, 'journal'), references: indexReferenceLog(index) },
    });
    const j = journal!;
    try {
      const { replayed, deferred } = await j.recover();
      if (deferred > 0) throw new MigrationRefused(`the index could not take ${deferred} journal references (disk full?): free space and run again`);
      const retired = await j.retire();
      return { replayed, segments_retired: retired, segments_pending: pendingSegments(o.dataDir) };
    } finally {
      await j.close();
    }
  } finally {
    await index.checkpoint();
    await index.close();
  }
}

/**
 * What would make the copy incomplete: a table or column the source has that COPIED_TABLES neither
 * copies nor deliberately leaves behind (a schema newer than this code), or a copied column the
 * target lacks.
 */
async function schemaProblems(source: IndexTables, target: PostgresTables): Promise<string[]> {
  const known = new Set([...COPIED_TABLES.map((s) => s.name as string), ...RUNTIME_TABLES]);
  const out = (await source.tables()).filter((t) => !known.has(t)).map((t) => `table ${t} is not known to the migration`);
  const targetReady = await target.hasSchema();
  for (const spec of COPIED_TABLES) {
    const here = await source.columns(spec.name);
    const copied = new Set([...spec.columns, ...Object.keys(spec.notCopied ?? {})]);
    out.push(...here.filter((c) => !copied.has(c)).map((c) => `column ${spec.name}.${c} is not known to the migration`));
    out.push(...spec.columns.filter((c) => !here.includes(c)).map((c) => `column ${spec.name}.${c} is missing here (index.sqlite)`));
    if (!targetReady) continue;
    const there = await target.columns(spec.name);
    out.push(...spec.columns.filter((c) => !there.includes(c)).map((c) => `column ${spec.name}.${c} is missing in the target`));
  }
  return out;
}

/** Copies one table page by page, with a progress line per page. */
class TableCopy {
  readonly #from: IndexTables;
  readonly #to: IndexTables;
  readonly #progress: (line: string) => void;

  constructor(from: IndexTables, to: IndexTables, progress: (line: string) => void) {
    this.#from = from;
    this.#to = to;
    this.#progress = progress;
  }

  async run(spec: TableSpec, total: number): Promise<number> {
    let read = 0;
    let added = 0;
    for await (const page of pages(this.#from, spec.name)) {
      added += await this.#to.write(spec.name, page);
      read += page.length;
      this.#progress(`index: ${spec.name} ${read}/${total} rows (${added} new)`);
    }
    return added;
  }
}

/**
 * Copies the objects table together with the objects' bytes: each page's objects are put in the
 * bucket first (read through the disk stack, written through the bucket's, so sha256 and size are
 * verified on the way and compression is the target's), then the page's rows are written with the
 * bucket's stored size. An object already in the bucket at its size is skipped.
 */
class ObjectCopy {
  readonly #from: BlobStore;
  readonly #to: BlobStore;
  readonly #progress: (line: string) => void;
  #copied = 0;
  #bytes = 0;
  #skipped = 0;
  #quarantined = 0;
  readonly #missing: string[] = [];
  readonly #refused: { oid: string; reason: string }[] = [];

  constructor(from: BlobStore, to: BlobStore, progress: (line: string) => void) {
    this.#from = from;
    this.#to = to;
    this.#progress = progress;
  }

  async run(source: IndexTables, target: IndexTables, total: number): Promise<number> {
    const quarantined = await quarantinedOids(source);
    let done = 0;
    let added = 0;
    const never = new AbortController().signal;
    for await (const page of pages(source, 'objects')) {
      const rows: TableRow[] = [];
      await forEachLimited(page, OBJECT_LANES, never, async (row) => {
        const stored = quarantined.has(row.oid as string) ? null : await this.#one(row.oid as Oid, row.size as number);
        if (stored === null && quarantined.has(row.oid as string)) this.#quarantined++;
        // The row goes in either way: references point at it; the report names what has no bytes.
        rows.push(stored === null ? row : { ...row, stored_size: stored });
        done++;
      });
      added += await target.write('objects', rows);
      await target.rewrite('objects', rows);
      this.#progress(`objects: ${done}/${total} (${this.#copied} copied, ${this.#skipped} already in the bucket)`);
    }
    return added;
  }

  /** Puts one object in the bucket unless it is there at its size; its stored size there, or null when it could not. */
  async #one(oid: Oid, size: number): Promise<number | null> {
    const there = await this.#to.stat(oid);
    if (there !== null && there.size === size) {
      this.#skipped++;
      return there.storedSize;
    }
    const reader = await this.#from.open(oid);
    if (reader === null) {
      this.#missing.push(oid);
      return null;
    }
    try {
      // replace: a copy of the wrong size (a torn earlier attempt by another tool) is overwritten.
      const writer = await this.#to.createWriter(oid, { repo: '', expectedSize: size, replace: there !== null });
      const put = await withObjectPull(reader, (pull) => pumpInto(pull, writer, () => undefined));
      this.#copied++;
      this.#bytes += size;
      return put.storedSize;
    } catch (e) {
      if (!isLfsError(e) || (e.code !== 'LFS_ERR_DIGEST_MISMATCH' && e.code !== 'LFS_ERR_SIZE_MISMATCH')) throw e;
      this.#refused.push({ oid, reason: e.message });
      return null;
    } finally {
      await reader.close();
    }
  }

  /** A dry run's figures: how many objects the bucket holds already. */
  async survey(source: IndexTables): Promise<ObjectsReport> {
    let total = 0;
    for await (const page of pages(source, 'objects')) {
      for (const row of page) {
        total++;
        const there = await this.#to.stat(row.oid as Oid);
        if (there !== null && there.size === row.size) this.#skipped++;
      }
    }
    return this.#report(total, []);
  }

  /** Every object of the target index that is not quarantined must be in the bucket at the stored size the index records. */
  async verify(target: IndexTables, raw: S3BlobStore): Promise<ObjectsReport> {
    const inBucket = new Map<string, number>();
    for await (const o of raw.list()) inBucket.set(o.oid, o.storedSize);
    // Objects already reported (no bytes on disk, bytes refused) are not counted again here.
    const skip = new Set([...(await quarantinedOids(target)), ...this.#missing, ...this.#refused.map((r) => r.oid)]);
    const absent: string[] = [];
    let total = 0;
    for await (const page of pages(target, 'objects')) {
      for (const row of page) {
        total++;
        if (skip.has(row.oid as string)) continue;
        if (inBucket.get(row.oid as string) !== row.stored_size) absent.push(row.oid as string);
      }
    }
    return this.#report(total, absent);
  }

  #report(total: number, absent: string[]): ObjectsReport {
    return {
      total,
      copied: this.#copied,
      bytes_copied: this.#bytes,
      already_in_bucket: this.#skipped,
      quarantined: this.#quarantined,
      missing_on_disk: this.#missing,
      refused: this.#refused,
      absent_from_bucket: absent,
    };
  }
}

async function quarantinedOids(tables: IndexTables): Promise<Set<string>> {
  const out = new Set<string>();
  for await (const page of pages(tables, 'quarantine')) for (const r of page) out.add(r.oid as string);
  return out;
}

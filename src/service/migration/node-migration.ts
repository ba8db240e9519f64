import { existsSync, readdirSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { redactDatabaseUrl } from '../../config/load.js';
import type { EncryptionConfig, S3Config } from '../../config/schema.js';
import type { KeyRing } from '../../crypto/key-ring.js';
import { openKeyRing } from '../../crypto/start-keys.js';
import { DataDirLock } from '../../db/data-dir-lock.js';
import { NODE_STALE_MS, type DataKeyIndex } from '../../db/index-types.js';
import { COPIED_TABLES, pages, RUNTIME_TABLES, tableDigest, type IndexTables, type TableSpec } from '../../db/index-tables.js';
import { PostgresTables } from '../../db/postgres/postgres-tables.js';
import { openSqliteIndex } from '../../db/sqlite/sqlite-index.js';
import { SqliteTables } from '../../db/sqlite/sqlite-tables.js';
import { StartRefusedError } from '../../errors/start-refused.js';
import { composeStore, encryptedBackend, openBackend, readingStore } from '../../store/compose.js';
import { DiskBlobStore } from '../../store/disk.js';
import type { S3BlobStore } from '../../store/s3/s3-store.js';
import type { BlobStore } from '../../store/types.js';
import type { Hasher } from '../../format/frame-codec.js';
import { openHasher } from '../../workers/native-hasher.js';
import { WorkerPool } from '../../workers/pool.js';
import { indexReferenceLog } from '../index-reference-log.js';
import { sourceDataKeys, targetDataKeys, type OpenDataKeys } from './migration-keys.js';
import { ObjectCopy, type ObjectsReport } from './object-copy.js';

export type { ObjectsReport } from './object-copy.js';

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
  /** SVC_ENCRYPTION and its keys, as the server had them: encrypted copies are read with them, and the bucket's are sealed when encryption is on. */
  readonly encryption: EncryptionConfig;
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
  const { hasher } = openHasher();
  const closing: (() => Promise<unknown>)[] = [];
  try {
    const disk = await DiskBlobStore.open(o.dataDir, { directIo: o.directIo });
    // The key ring is checked against the index before anything is written (a dry run checks it below, once the schema is known).
    const replay = o.dryRun ? null : await replayJournal(o, indexFile, disk, pool, hasher);
    const journal = replay?.journal ?? { replayed: 0, segments_retired: 0, segments_pending: pendingSegments(o.dataDir) };
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

    const sourceKeys = sourceDataKeys(indexFile);
    closing.push(() => sourceKeys.close());
    const ring = replay?.ring ?? (await keyRing(o.encryption, sourceKeys.keys));
    // Encrypted copies are read with the node's keys; without keys the stack is the one plain stores always had.
    const reading = readingStore(ring === null ? disk : encryptedBackend(disk, { keys: sourceKeys.keys, ring, encryptNew: false }), pool);

    let bucket: { store: BlobStore; raw: S3BlobStore; keys: OpenDataKeys } | null = null;
    if (o.bucket !== null) {
      // The same credential chain as a node's (environment, web identity, profiles, instance roles).
      const raw = (await openBackend({ s3: o.bucket, dataDir: o.dataDir, directIo: false }, (msg) => o.progress(msg))) as S3BlobStore;
      closing.push(() => raw.close());
      const keys = targetDataKeys(o.targetUrl);
      closing.push(() => keys.close());
      // A node's stack on the target: with encryption on, each copy is sealed under a fresh data key recorded in the target index.
      const encryption = ring === null ? null : { keys: keys.keys, ring, encryptNew: o.encryption.encryptNew };
      const { store } = await composeStore({ backend: raw, codec: pool, hasher, compressionLevel: o.compressionLevel, journal: null, encryption });
      bucket = { store, raw, keys };
    }
    const copy = new TableCopy(source, target, o.progress);
    const objects =
      bucket === null ? null : new ObjectCopy(reading, { store: bucket.store, raw: bucket.raw, sealed: ring !== null && o.encryption.encryptNew, readBack: ring === null ? null : hasher }, o.progress);
    const tables: TableReport[] = [];
    for (const spec of COPIED_TABLES) {
      const sourceRows = await source.count(spec.name);
      let copied = 0;
      if (!o.dryRun) {
        // The source's data keys name copies on its disk only: the bucket's copies bring their own (or none, plain).
        if (spec.name === 'data_keys' && bucket !== null) copied = 0;
        else if (spec.name === 'objects' && objects !== null) copied = await objects.run(source, target, sourceRows);
        else copied = await copy.run(spec, sourceRows);
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
      if (spec.name === 'data_keys' && bucket !== null) {
        const { same, problem } = await dataKeysUsable(bucket.keys.keys, ring);
        if (problem !== null) found.push(problem);
        checked.push({ ...t, target_rows: await target.count(spec.name), verified: same });
        continue;
      }
      const [a, b] = await Promise.all([tableDigest(source, spec), tableDigest(target, spec)]);
      const same = a.rows === b.rows && a.digest === b.digest;
      if (!same) found.push(`table ${t.table}: ${a.rows} rows here, ${b.rows} in the target${a.rows === b.rows ? ', with different content' : ''}`);
      checked.push({ ...t, target_rows: b.rows, verified: same });
    }
    let objectReport: ObjectsReport | null = null;
    if (objects !== null && bucket !== null) {
      o.progress('verifying: every object in the bucket');
      objectReport = await objects.verify(target);
      if (objectReport.missing_on_disk.length > 0) found.push(`${objectReport.missing_on_disk.length} objects in the index are not on disk (copied as references only)`);
      if (objectReport.refused.length > 0) found.push(`${objectReport.refused.length} objects on disk do not match their oid (not copied)`);
      if (objectReport.absent_from_bucket.length > 0) found.push(`${objectReport.absent_from_bucket.length} objects are not in the bucket at the size the index records`);
      if (objectReport.unreadable_in_bucket.length > 0) found.push(`${objectReport.unreadable_in_bucket.length} objects in the bucket do not read back to their oid`);
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

/**
 * The node's key ring, taken as the server takes it at start (same settings, same refusal when a data
 * key of `keys` is wrapped under a key the ring lacks, naming it): objects it could not read would
 * otherwise be refused one by one, after the tables were copied.
 */
async function keyRing(config: EncryptionConfig, keys: DataKeyIndex): Promise<KeyRing | null> {
  try {
    return await openKeyRing(config, keys);
  } catch (e) {
    if (e instanceof StartRefusedError) throw new MigrationRefused(e.message);
    throw e;
  }
}

/**
 * With --objects the target's data keys are the bucket copies' own, not the source's rows: they are
 * proven by reading every copy back (ObjectCopy.verify); here, that the nodes will start on them
 * (every row wrapped under a key of the ring).
 */
async function dataKeysUsable(keys: DataKeyIndex, ring: KeyRing | null): Promise<{ same: boolean; problem: string | null }> {
  const missing = (await keys.kekIdsInUse()).filter((id) => ring === null || !ring.has(id));
  if (missing.length === 0) return { same: true, problem: null };
  return { same: false, problem: `table data_keys: the target holds data keys wrapped under key ${missing.join(', ')}, which the key ring lacks` };
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
async function replayJournal(o: MigrationOptions, indexFile: string, disk: DiskBlobStore, pool: WorkerPool, hasher: Hasher): Promise<{ journal: MigrationReport['journal']; ring: KeyRing | null }> {
  const index = openSqliteIndex(indexFile);
  try {
    const ring = await keyRing(o.encryption, index.dataKeys);
    const { journal } = await composeStore({
      backend: disk,
      codec: pool,
      hasher,
      compressionLevel: o.compressionLevel,
      journal: { dir: join(o.dataDir, 'journal'), references: indexReferenceLog(index) },
      // As the server's start: with encryption on, journaled objects are written out sealed.
      encryption: ring === null ? null : { keys: index.dataKeys, ring, encryptNew: o.encryption.encryptNew },
    }).catch((e: unknown) => {
      // A journal segment sealed under a key the ring lacks: refused as the index's keys are, not taken for the lock.
      throw e instanceof StartRefusedError ? new MigrationRefused(e.message) : e;
    });
    const j = journal!;
    try {
      const { replayed, deferred } = await j.recover();
      if (deferred > 0) throw new MigrationRefused(`the index could not take ${deferred} journal references (disk full?): free space and run again`);
      const retired = await j.retire();
      return { journal: { replayed, segments_retired: retired, segments_pending: pendingSegments(o.dataDir) }, ring };
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


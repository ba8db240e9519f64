#!/usr/bin/env node
/**
 * `npm run backup -- --data-dir DIR --to DEST`: backs up a running server's data directory in the
 * one consistent order (docs/operations.md, "Backup and restore"):
 *   1. the index (SQLite online backup: every acknowledged reference);
 *   2. the journal segments (small objects acknowledged before 1 are there or in their files);
 *   3. the object files (repos/, then objects/), last, so all that 1 references is there.
 * Objects appear only by atomic rename. A rerun into the same DEST is incremental. `--index-only`
 * does step 1 alone (SVC_STORE=s3, or objects backed up by another tool afterwards).
 */
import { copyFile, mkdir, readdir, rm, stat, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { backupIndex } from './db/sqlite/index-backup.js';

const USAGE = `usage: npm run backup -- --data-dir DIR --to DEST [--index-only]
  --data-dir DIR   the server's SVC_DATA_DIR (it may be running)
  --to DEST        a directory that does not hold another server's data (created if absent)
  --index-only     copy only the index (SVC_STORE=s3, or objects backed up by another tool after this)
`;

/**
 * Object trees copied in step 3, relative to the data directory. Legacy files move from repos/ into
 * objects/ (dedupe), so repos/ goes first for the same reason the journal does.
 */
const OBJECT_TREES = ['repos', 'objects'];
/** Journal segments (journal/segment-log.ts names them); next.spare and recycled-*.spare hold no records that count and are not copied. */
const SEGMENT = /^seg-\d{12}\.log$/;

interface Counts {
  files: number;
  bytes: number;
  skipped: number;
}

function isMissing(e: unknown): boolean {
  return (e as NodeJS.ErrnoException)?.code === 'ENOENT';
}

/**
 * Skips a file DEST has at the same size and mtime (size alone is not enough: rekey rewrites an
 * object at the same size under a new data key); a file removed meanwhile is no error.
 */
async function copyOne(from: string, to: string, counts: Counts, alwaysCopy: boolean): Promise<void> {
  try {
    const src = await stat(from);
    if (!alwaysCopy) {
      const dst = await stat(to).catch(() => null);
      if (dst !== null && dst.size === src.size && Math.trunc(dst.mtimeMs) === Math.trunc(src.mtimeMs)) {
        counts.skipped++;
        return;
      }
    }
    await copyFile(from, to);
    await utimes(to, src.atime, src.mtime);
    counts.files++;
    counts.bytes += src.size;
  } catch (e) {
    // Retain, quarantine or journal retirement removed it after the listing: the index snapshot of
    // step 1 either no longer references it or its bytes are in a place copied after this one.
    if (!isMissing(e)) throw e;
  }
}

async function copyTree(from: string, to: string, counts: Counts): Promise<void> {
  let entries;
  try {
    entries = await readdir(from, { withFileTypes: true });
  } catch (e) {
    if (isMissing(e)) return;
    throw e;
  }
  await mkdir(to, { recursive: true });
  for (const e of entries) {
    if (e.isDirectory()) await copyTree(join(from, e.name), join(to, e.name), counts);
    else if (e.isFile()) await copyOne(join(from, e.name), join(to, e.name), counts, false);
  }
}

async function run(): Promise<number> {
  let args;
  try {
    args = parseArgs({ options: { 'data-dir': { type: 'string' }, to: { type: 'string' }, 'index-only': { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: false }).values;
  } catch (e) {
    process.stderr.write(`backup: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (args.help === true) {
    process.stdout.write(USAGE);
    return 0;
  }
  const dataDir = args['data-dir'];
  const dest = args.to;
  if (dataDir === undefined || dest === undefined) {
    process.stderr.write(`backup: --data-dir and --to are required\n${USAGE}`);
    return 2;
  }
  await mkdir(dest, { recursive: true });
  const started = Date.now();

  // 1. The index snapshot, before anything else.
  const pages = await backupIndex(join(dataDir, 'index.sqlite'), join(dest, 'index.sqlite'));
  process.stdout.write(`index: ${pages} pages copied (online backup)\n`);
  if (args['index-only'] === true) return 0;

  // 2. The journal: whole segments, always recopied (the open segment grows in place). Segments of
  // an earlier backup into DEST go first: replaying one would bring back references retain dropped.
  const journal: Counts = { files: 0, bytes: 0, skipped: 0 };
  await rm(join(dest, 'journal'), { recursive: true, force: true });
  await mkdir(join(dest, 'journal'), { recursive: true });
  const segments = (await readdir(join(dataDir, 'journal')).catch((e: unknown) => (isMissing(e) ? [] : Promise.reject(e)))).filter((n) => SEGMENT.test(n));
  for (const name of segments) await copyOne(join(dataDir, 'journal', name), join(dest, 'journal', name), journal, true);
  process.stdout.write(`journal: ${journal.files} segments, ${journal.bytes} bytes\n`);

  // 3. The objects, last.
  const objects: Counts = { files: 0, bytes: 0, skipped: 0 };
  for (const tree of OBJECT_TREES) await copyTree(join(dataDir, tree), join(dest, tree), objects);
  process.stdout.write(`objects: ${objects.files} copied (${objects.bytes} bytes), ${objects.skipped} already in ${dest}\n`);
  process.stdout.write(`backup complete in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  return 0;
}

run().then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`backup failed: ${(e as Error)?.message ?? String(e)}\n`);
    process.exitCode = 1;
  },
);

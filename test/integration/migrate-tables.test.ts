import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { connect } from '../../src/db/postgres/pg-client.js';
import { PostgresIndex } from '../../src/db/postgres/postgres-index.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import type { Oid } from '../../src/protocol/oid.js';
import { DiskBlobStore } from '../../src/store/disk.js';
import { JournalingBlobStore } from '../../src/store/journal/journaling-store.js';
import { migrateNode, MigrationRefused, type MigrationOptions } from '../../src/service/migration/node-migration.js';
import { startPostgres } from '../helpers/postgres.js';
import { tmpDir } from '../helpers/start-server.js';

// The index part of `stowage migrate`, in process against a real SQLite file and a throwaway
// PostgreSQL: every copied table equal afterwards, the lock identity continuing past the source's
// high-water mark, a rerun adding nothing, and the differences verification must catch.
const pg = await startPostgres((fn) => t.teardown(fn));
const oid = (s: string): Oid => createHash('sha256').update(s).digest('hex') as Oid;
const NOW = 1_760_000_000_000;

const dataDir = tmpDir('stowage-migrate-tables-');
const target = await pg.createDatabase();
const lines: string[] = [];
const options: MigrationOptions = {
  dataDir,
  targetUrl: target,
  bucket: null,
  compressionLevel: null,
  encryption: { keyFile: null, keyCommand: null, encryptNew: false, cipher: 'auto' },
  workers: 1,
  directIo: false,
  dryRun: false,
  progress: (l) => lines.push(l),
};

// A source index with a row in every copied table, written through the index's own API.
const src = openSqliteIndex(join(dataDir, 'index.sqlite'));
await src.objects.addReference('acme/game', oid('a'), 10, 8);
await src.objects.addReference('acme/game', oid('b'), 20, 20);
await src.objects.addReference('Zeta/tools', oid('a'), 10, 8);
await src.objects.addReference('Zeta/tools', oid('gone'), 5, 5);
if ((await src.maintenance.dropReference('Zeta/tools', oid('gone'), NOW, 'node-1')) !== 'delete') throw new Error('expected a deletion intent');
await src.maintenance.quarantine(oid('b'), 'acme/game', 'digest mismatch');
const lock = (id: string, path: string) => ({ id, repo: 'acme/game', path, ref: id === 'l1' ? 'refs/heads/main' : null, ownerId: '7', ownerName: 'dev', lockedAt: NOW });
await src.locks.create(lock('l1', 'a.psd'), null);
await src.locks.create(lock('l2', 'b.psd'), null);
await src.locks.create(lock('l3', 'c.psd'), null);
await src.locks.delete('acme/game', 'l3'); // the high-water mark (3) is above the largest seq left (2)
await src.sessions.insert({ idHash: 'h'.repeat(64), userId: '1', userName: 'root', via: 'site_admin', createdAt: NOW, expiresAt: NOW + 3600_000 });
await src.settings.put('access', { max_object_size: 8 << 20, allowed_repos: ['acme/*'] }, 'root', NOW);
await src.jobs.insert('job1', 'audit', 'acme/game', false, NOW, 'node-1');
await src.jobs.finish('job1', 'done', { objects: 2, corrupt: 1, note: 'ünïcode' }, null, { objectsDone: 2, objectsTotal: 2, bytesDone: 30, bytesTotal: 30 });
await src.jobs.insert('job2', 'retain', 'acme/game', true, NOW + 1, 'node-1');
await src.stats.recordAudit('acme/game', { finishedAt: NOW, objects: 2, bytes: 30, corrupt: 1, unreadable: 0, complete: true });
await src.stats.insertSample({ at: NOW, repositories: 2, objects: 2, logicalBytes: 40, storedBytes: 28, uploads: 4, uploadBytes: 45, downloads: 0, downloadBytes: 0, rejections: { quota: 1 } });
await src.close();

t.test('every table copied and verified; the lock identity continues; a rerun adds nothing', async (t) => {
  const report = await migrateNode(options);
  t.same(report.problems, []);
  t.equal(report.verified, true);
  const rows = Object.fromEntries(report.tables.map((x) => [x.table, x]));
  t.match(rows, {
    objects: { source_rows: 2, copied: 2, target_rows: 2, verified: true },
    repo_objects: { source_rows: 3, target_rows: 3 },
    locks: { source_rows: 2, target_rows: 2 },
    sessions: { target_rows: 1 },
    settings: { target_rows: 1 },
    jobs: { target_rows: 2 },
    quarantine: { target_rows: 1 },
    pending_deletes: { target_rows: 1 },
    repo_audits: { target_rows: 1 },
    stats_samples: { target_rows: 1 },
  });
  t.ok(lines.some((l) => /^index: locks 2\/2 rows \(2 new\)$/.test(l)), 'progress names the table and its rows');

  // What a node on the copy sees, through the PostgreSQL index itself.
  const idx = await PostgresIndex.open(target);
  t.teardown(() => idx.close());
  t.same(await idx.objects.findInRepo('Zeta/tools', oid('a')), { oid: oid('a'), size: 10, storedSize: 8 }, 'a reference');
  t.equal(await idx.objects.findInRepo('acme/game', oid('b')), null, 'the quarantine holds');
  t.match(await idx.locks.findById('acme/game', 'l1'), { seq: 1, path: 'a.psd', ref: 'refs/heads/main' }, 'a lock keeps its id and seq');
  const made = await idx.locks.create({ ...lock('l4', 'd.psd') }, null);
  t.match(made, { kind: 'created', lock: { seq: 4 } }, 'a new lock takes the seq after the source\'s high-water mark');
  t.match(await idx.sessions.find('h'.repeat(64), NOW), { userName: 'root', via: 'site_admin' }, 'the session');
  t.match(await idx.settings.get('access'), { value: { max_object_size: 8 << 20, allowed_repos: ['acme/*'] }, updatedBy: 'root' }, 'the setting');
  t.match(await idx.jobs.get('job1'), { state: 'done', report: { note: 'ünïcode' }, objectsTotal: 2 }, 'a finished job and its report');
  t.match(await idx.jobs.get('job2'), { state: 'running', finishedAt: null, bytesTotal: null }, 'nulls stay null');
  t.same(await idx.maintenance.pendingDeletes(NOW), [oid('gone')], 'the deletion intent, for the next retain to finish');
  t.match(await idx.stats.lastSample(), { at: NOW, rejections: { quota: 1 } }, 'the stats sample');
  t.match(await idx.stats.lastAudit('acme/game'), { corrupt: 1, complete: true }, 'the last audit');
  await idx.locks.delete('acme/game', 'l4');

  const again = await migrateNode(options);
  t.equal(again.verified, true, 'a rerun verifies');
  t.ok(again.tables.every((x) => x.copied === 0), 'and adds no row');
});

t.test('verification catches a row that differs in the target', async (t) => {
  const { sql } = connect(target);
  t.teardown(() => sql.end());
  await sql`UPDATE settings SET value = '{"max_object_size":1}'`;
  const report = await migrateNode(options);
  t.equal(report.verified, false);
  t.match(report.problems, [/^table settings: 1 rows here, 1 in the target, with different content$/]);
  t.match(report.tables.find((x) => x.table === 'settings'), { verified: false });
  await sql`UPDATE settings SET value = ${JSON.stringify({ max_object_size: 8 << 20, allowed_repos: ['acme/*'] })}`;
  t.equal((await migrateNode(options)).verified, true, 'and verifies once it is the same again');
});

t.test('refused while a node runs on the target database', async (t) => {
  const { sql } = connect(target);
  t.teardown(() => sql.end());
  await sql`INSERT INTO nodes (node, seen_at) VALUES ('n1', ${Date.now()}::int8)`;
  await t.rejects(migrateNode(options), /1 Stowage node\(s\) are running on postgres:\/\/postgres@127\.0\.0\.1:\d+\/\w+: stop them first/);
  await sql`DELETE FROM nodes`;
});

t.test('a legacy folder dedupe has not folded is reported, not lost silently', async (t) => {
  const dir = join(dataDir, 'repos', 'acme', 'old', 'ab', 'cd');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, oid('legacy')), 'x');
  const report = await migrateNode(options);
  t.equal(report.verified, false);
  t.match(report.problems, [/^acme\/old: .*stowage dedupe acme\/old/]);
});

t.test('a column the migration does not know refuses the copy', async (t) => {
  const db = new Database(join(dataDir, 'index.sqlite'));
  db.exec('ALTER TABLE sessions ADD COLUMN device TEXT');
  db.close();
  await t.rejects(migrateNode(options), new MigrationRefused('the schemas differ from what this version copies:\n  column sessions.device is not known to the migration'));
});

t.test('the journal is replayed first: an acknowledged upload only the journal holds is copied', async (t) => {
  const dir = tmpDir('stowage-migrate-journal-');
  await openSqliteIndex(join(dir, 'index.sqlite')).close();
  // A small upload acknowledged from the journal, then a crash before the index recorded it and
  // before retirement gave it a file: its only traces are the journal's record and bytes.
  const disk = await DiskBlobStore.open(dir);
  const journal = await JournalingBlobStore.open(disk, join(dir, 'journal'), { restore: async () => undefined, isWanted: async () => true, stored: async () => undefined, checkpoint: async () => undefined });
  const data = Buffer.from('only in the journal\n');
  const small = createHash('sha256').update(data).digest('hex') as Oid;
  const w = await journal.journal.createWriter('acme/journal', small, { expectedSize: data.length });
  w.write(data);
  await w.finish();
  await journal.close();
  t.notOk(existsSync(disk.pathOf(small)), 'no file of its own yet');

  const db = await pg.createDatabase();
  const report = await migrateNode({ ...options, dataDir: dir, targetUrl: db });
  t.equal(report.verified, true);
  t.equal(report.journal.replayed, 1, 'the journal record is replayed into index.sqlite');
  t.ok(report.journal.segments_retired >= 1, 'and its segment written out');
  t.ok(readFileSync(disk.pathOf(small)).equals(data), 'the object has its own file on disk');
  const idx = await PostgresIndex.open(db);
  t.teardown(() => idx.close());
  t.same(await idx.objects.findInRepo('acme/journal', small), { oid: small, size: data.length, storedSize: data.length }, 'and its reference is in PostgreSQL');
});

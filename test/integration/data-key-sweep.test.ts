import { createHash, randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import postgres from 'postgres';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { KeyRing } from '../../src/crypto/key-ring.js';
import { PG_MIGRATIONS } from '../../src/db/postgres/migrations/index.js';
import { PostgresIndex } from '../../src/db/postgres/postgres-index.js';
import { MIGRATIONS } from '../../src/db/sqlite/migrations/index.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { MAGIC } from '../../src/format/encrypted-format.js';
import type { Oid } from '../../src/protocol/oid.js';
import { encryptedBackend, ForwardingBlobStore } from '../../src/store/compose.js';
import { DiskBlobStore } from '../../src/store/disk.js';
import { FaultyBlobStore } from '../../src/store/layers/faulty.js';
import type { BlobStore, ObjectWriter, PutResult, WriterOptions } from '../../src/store/types.js';
import { sweepDataKeys, type DataKeySweepDeps } from '../../src/service/maintenance/data-key-sweep.js';
import { dataKeyOf } from '../../src/service/maintenance/stored-data-key.js';
import { drainChunks } from '../helpers/data.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, blobOf, http, push } from '../helpers/lfs-http.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// The data key sweep over a real disk store under the encrypting layer and a real SQLite index, its
// clock moved by the test: rows no stored copy names (an orphan, a write that died between
// recording its key and making its copy visible) go once older than the grace; the row of a write
// still under way, and any row younger than the grace, stay; every object still reads.

const GRACE_MS = 86_400_000;
const ring = KeyRing.parse(`k1 ${randomBytes(32).toString('base64')}`);
const oidOf = (data: Buffer): Oid => createHash('sha256').update(data).digest('hex') as Oid;
const never = new AbortController().signal;
// Started before the first subtest (see startPostgres).
const pg = hasPostgres() ? await startPostgres((fn) => t.teardown(fn)) : null;

/** Writers whose backend finish waits for `release` (as a slow rename would), or for ever (a process that died there). */
class HeldFinishes extends ForwardingBlobStore {
  readonly release: (() => void)[] = [];
  readonly #waiting: { n: number; done: () => void }[] = [];

  /** Resolves once `n` writers have reached their backend finish. */
  reached(n: number): Promise<void> {
    return this.release.length >= n ? Promise.resolve() : new Promise((done) => this.#waiting.push({ n, done }));
  }

  override async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const inner = await this.inner.createWriter(oid, options);
    return {
      write: (chunk, release) => inner.write(chunk, release),
      onDrain: (listener) => inner.onDrain(listener),
      abort: () => inner.abort(),
      finish: async (): Promise<PutResult> => {
        const released = new Promise<void>((r) => this.release.push(r));
        for (const w of this.#waiting) if (this.release.length >= w.n) w.done();
        await released;
        return inner.finish();
      },
    };
  }
}

async function put(store: BlobStore, data: Buffer): Promise<PutResult> {
  const w = await store.createWriter(oidOf(data), { expectedSize: data.byteLength });
  w.write(data);
  return w.finish();
}

async function readsBack(store: BlobStore, data: Buffer): Promise<boolean> {
  const r = await store.open(oidOf(data));
  if (r === null) return false;
  try {
    return (r.size === 0 ? Buffer.alloc(0) : await drainChunks(r.read(0, r.size - 1))).equals(data);
  } finally {
    await r.close();
  }
}

async function setUp() {
  const dir = tmpDir('stowage-keysweep-');
  const index = openSqliteIndex(join(dir, 'index.sqlite'));
  t.teardown(() => index.close());
  const disk = await DiskBlobStore.open(join(dir, 'store'));
  const held = new HeldFinishes(disk);
  const parts = { keys: index.dataKeys, ring, encryptNew: true };
  const clock = { now: Date.now() };
  const logged: string[] = [];
  const deps: DataKeySweepDeps = { dataKeys: index.dataKeys, stored: disk, graceMs: GRACE_MS, now: () => clock.now, parallelism: 2, log: (msg) => logged.push(msg) };
  return { index, disk, store: encryptedBackend(disk, parts), slow: encryptedBackend(held, parts), held, clock, deps, logged };
}

const orphanRow = (at?: number) => {
  const id = randomBytes(16).toString('hex');
  return { id, row: { dataKeyId: id, ...ring.wrap(randomBytes(32), id) }, at };
};

t.test('rows no stored copy names go once past the grace; rows of copies, of writes under way and young rows stay', async (t) => {
  const { index, disk, store, slow, held, clock, deps } = await setUp();
  const objects = [randomBytes(300_000), randomBytes(5_000), randomBytes(0)];
  for (const o of objects) t.equal((await put(store, o)).created, true);
  const named = await Promise.all(objects.map((o) => dataKeyOf(disk, oidOf(o))));
  t.ok(named.every((id) => /^[0-9a-f]{32}$/.test(id)), 'each copy names its data key');

  const orphan = orphanRow();
  await index.dataKeys.putDataKey(orphan.row);
  // Two writes stopped between recording their key and making their copy visible: one finishes
  // later (slow), the other never does (its process died).
  const [finishing, died] = [randomBytes(70_000), randomBytes(9_000)];
  const finished = put(slow, finishing);
  void put(slow, died);
  await held.reached(2);
  const rows = async (): Promise<number> => (await index.dataKeys.dataKeyIdsWrittenBefore(Number.MAX_SAFE_INTEGER, null, 100)).length;
  t.equal(await rows(), 6, 'three copies, the orphan and the two writes under way have rows');

  t.same(await sweepDataKeys(deps, false, never), { swept: 0, complete: true }, 'within the grace nothing goes, not even the orphan');
  t.equal(await rows(), 6);
  held.release[0]!();
  t.equal((await finished).created, true, 'the slow write finishes after the sweep');

  clock.now += GRACE_MS + 60_000;
  const young = orphanRow();
  await index.dataKeys.putDataKey(young.row, clock.now - 1000);
  t.same(await sweepDataKeys(deps, true, never), { swept: 2, complete: true }, 'a dry run counts the orphan and the dead write');
  t.equal(await rows(), 7, 'and deletes nothing');
  t.same(await sweepDataKeys(deps, false, never), { swept: 2, complete: true }, 'past the grace: the orphan and the dead write go');
  t.equal(await index.dataKeys.getDataKey(orphan.id), null, 'the orphan row is deleted');
  t.ok((await index.dataKeys.getDataKey(young.id)) !== null, 'a row younger than the grace is kept');
  for (const id of [...named, await dataKeyOf(disk, oidOf(finishing))]) t.ok((await index.dataKeys.getDataKey(id)) !== null, `the row ${id.slice(0, 8)}… a copy names is kept`);
  t.equal(await rows(), 5);
  for (const o of [...objects, finishing]) t.ok(await readsBack(store, o), `${o.byteLength} bytes read back intact`);
  t.same(await sweepDataKeys(deps, false, never), { swept: 0, complete: true }, 'a second sweep finds nothing');
});

t.test('a stored copy whose data key cannot be told keeps every row', async (t) => {
  const { index, disk, store, clock, deps, logged } = await setUp();
  await put(store, randomBytes(4_000));
  // Looks encrypted (the magic), but its header does not parse: whatever key it names must stay.
  const damaged = Buffer.concat([MAGIC, Buffer.from([9, 9]), randomBytes(200)]);
  await put(disk, damaged);
  t.equal(await dataKeyOf(disk, oidOf(damaged)), 'damaged');
  const orphan = orphanRow();
  await index.dataKeys.putDataKey(orphan.row);
  clock.now += GRACE_MS + 60_000;
  t.same(await sweepDataKeys(deps, false, never), { swept: 0, complete: false }, 'nothing is deleted, and the sweep says it is not complete');
  t.ok((await index.dataKeys.getDataKey(orphan.id)) !== null, 'the orphan is kept');
  t.match(logged, [/some stored copies do not say their data key/], 'and why is logged');
  await disk.delete(oidOf(damaged));
  const unlisted = new FaultyBlobStore(disk, { fail: ['list'] });
  t.same(await sweepDataKeys({ ...deps, stored: unlisted }, false, never), { swept: 0, complete: false }, 'a store that cannot be listed keeps every row');
  t.equal(unlisted.injected, 1, '(the listing failed)');
  t.same(await sweepDataKeys(deps, false, never), { swept: 1, complete: true }, 'once every copy says its key, the orphan goes');
});

t.test('rows an index held before the upgrade are as old as the upgrade (sqlite migration)', async (t) => {
  const file = join(tmpDir('stowage-keysweep-'), 'index.sqlite');
  const old = new Database(file);
  const upTo = MIGRATIONS.findIndex((m) => m.name === '009-data-keys');
  for (let v = 0; v <= upTo; v++) {
    old.exec(MIGRATIONS[v]!.sql);
    old.pragma(`user_version = ${v + 1}`);
  }
  const id = randomBytes(16).toString('hex');
  old.prepare('INSERT INTO data_keys (data_key_id, kek_id, wrapped) VALUES (?, ?, ?)').run(id, 'k1', randomBytes(60).toString('base64'));
  old.close();
  const before = Date.now();
  const index = openSqliteIndex(file);
  t.teardown(() => index.close());
  t.same(await index.dataKeys.dataKeyIdsWrittenBefore(before - 1000, null, 10), [], 'not older than the migration');
  t.same(await index.dataKeys.dataKeyIdsWrittenBefore(Date.now() + 1000, null, 10), [id], 'stamped with its time');
  t.equal((await index.dataKeys.getDataKey(id))?.kekId, 'k1', 'the row is otherwise as it was');
});

t.test('rows an index held before the upgrade are as old as the upgrade (postgres migration)', async (t) => {
  if (pg === null) return void t.fail(POSTGRES_INSTALL_HINT);
  const url = await pg.createDatabase();
  const admin = postgres(url, { max: 1, onnotice: () => undefined });
  t.teardown(() => admin.end());
  const upTo = PG_MIGRATIONS.findIndex((m) => m.name === '005-data-keys');
  const id = randomBytes(16).toString('hex');
  await admin.begin(async (tx) => {
    await tx`CREATE TABLE schema_version (version INTEGER NOT NULL)`;
    for (let v = 0; v <= upTo; v++) await tx.unsafe(PG_MIGRATIONS[v]!.sql).simple();
    await tx`INSERT INTO schema_version (version) VALUES (${upTo + 1})`;
    await tx`INSERT INTO data_keys (data_key_id, kek_id, wrapped) VALUES (${id}, 'k1', ${randomBytes(60).toString('base64')})`;
  });
  const before = Date.now();
  const index = await PostgresIndex.open(url);
  t.teardown(() => index.close());
  t.same(await index.dataKeys.dataKeyIdsWrittenBefore(before - 1000, null, 10), [], 'not older than the migration');
  t.same(await index.dataKeys.dataKeyIdsWrittenBefore(Date.now() + 1000, null, 10), [id], 'stamped with its time');
  // A node of the previous version names no time: its row is young, never old.
  const late = randomBytes(16).toString('hex');
  await admin`INSERT INTO data_keys (data_key_id, kek_id, wrapped) VALUES (${late}, 'k1', ${randomBytes(60).toString('base64')})`;
  t.same(await index.dataKeys.dataKeyIdsWrittenBefore(before - 1000, null, 10), [], 'a row inserted without a time is not old');
});

t.test('rewrap with sweep on the real server deletes old unused rows; audits and a plain rewrap touch none', async (t) => {
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set('acme/vault', { private: true });
  forge.tokens.set('tok-server-admin', { login: 'root', siteAdmin: true, repos: {} });
  forge.tokens.set('tok-admin', { login: 'boss', repos: { 'acme/vault': 'admin' } });
  forge.tokens.set('tok-push', { login: 'dev', repos: { 'acme/vault': 'push' } });
  const keyFile = join(tmpDir('stowage-keys-'), 'keys');
  writeFileSync(keyFile, `k1 ${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
  const dataDir = tmpDir();
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_ENCRYPTION_KEY_FILE: keyFile, SVC_WORKERS: '2' }, { dataDir });
  t.teardown(() => server.stop('SIGKILL'));
  const blobs = [blobOf(randomBytes(200_000)), blobOf(randomBytes(90_000))];
  for (const b of blobs) t.equal(await push(server.url, 'acme/vault', 'tok-push', b), 200);

  // Rows the server's index holds besides its copies': one written 30 days ago (past SVC_GC_GRACE's
  // default 14 days), one just now.
  const index = openSqliteIndex(join(dataDir, 'index.sqlite'));
  t.teardown(() => index.close());
  const old = orphanRow();
  const young = orphanRow();
  await index.dataKeys.putDataKey(old.row, Date.now() - 30 * GRACE_MS);
  await index.dataKeys.putDataKey(young.row);

  const audit = async (token: string, body: object): Promise<any> =>
    (await http('POST', `${server.url}/acme/vault/objects/audit`, { headers: { authorization: basic(token), 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
  const rewrap = async (token: string, body: object): Promise<{ status: number; json: any }> => {
    const r = await http('POST', `${server.url}/-/objects/rewrap`, { headers: { authorization: basic(token), 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, json: r.json() };
  };
  t.match(await audit('tok-push', {}), { objects: 2, ok: 2, complete: true }, 'a read-only audit');
  t.match(await audit('tok-admin', { quarantine: true }), { objects: 2, ok: 2, complete: true, outcome: 'clean' }, "a repository admin's quarantining audit");
  t.match((await rewrap('tok-admin', { sweep: true })).status, 403, 'a repository admin cannot start a store-wide sweep');
  t.match((await rewrap('tok-server-admin', {})).json, { unused_data_keys: 0, complete: true }, 'a rewrap not asked to sweep');
  t.ok((await index.dataKeys.getDataKey(old.id)) !== null, 'the old unused row is still there');
  t.match((await rewrap('tok-server-admin', { sweep: true })).json, { unused_data_keys: 1, complete: true, outcome: 'clean' }, 'rewrap with sweep deletes it');
  t.equal(await index.dataKeys.getDataKey(old.id), null, 'the old unused row is gone');
  t.ok((await index.dataKeys.getDataKey(young.id)) !== null, 'the young one stays');
  for (const b of blobs) {
    const r = await http('GET', `${server.url}/acme/vault/objects/${b.oid}`, { headers: { authorization: basic('tok-push') } });
    t.ok(r.status === 200 && oidOf(r.body) === b.oid, `${b.size} bytes download intact`);
  }
});

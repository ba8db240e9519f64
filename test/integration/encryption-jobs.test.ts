import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { HEADER_SIZE, looksEncrypted } from '../../src/format/encrypted-format.js';
import { textLike } from '../helpers/data.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, blobOf, http, push, type Blob } from '../helpers/lfs-http.js';
import { startS3Server, type S3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, waitForFile, type RunningServer } from '../helpers/start-server.js';

// `stowage encrypt` brings a store that ran without encryption under it, and `stowage rekey` writes
// every object again under a fresh data key, deleting the old ones: from outside, with the real
// server and CLI, on the disk store and on the S3 store. Afterwards no object file holds known plaintext, each object's copy names a new
// data key, the old data keys are gone from the index, compressed objects stay compressed, and
// every object downloads intact.

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const run = promisify(execFile);

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/vault', { private: true });
forge.tokens.set('tok-admin', { login: 'boss', repos: { 'acme/vault': 'admin' } });
forge.tokens.set('tok-push', { login: 'dev', repos: { 'acme/vault': 'push' } });
const auth = { authorization: basic('tok-admin') };

const keyFile = join(tmpDir('stowage-keys-'), 'keys');
writeFileSync(keyFile, `k1 ${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
const env = { SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd', SVC_WORKERS: '2' };

/** A line no store should hold in the clear, repeated through compressible text. */
const MARK = 'confidential-level-geometry';
const marked = (size: number, seed: number): Buffer => Buffer.from(textLike(size, seed).toString('latin1').replace(/vertex/g, MARK), 'latin1');
const blobs: Blob[] = [blobOf(marked(200_000, 1)), blobOf(randomBytes(150_000)), blobOf(marked(3_000_000, 2)), blobOf(randomBytes(2_000_000))];
/** Where a store keeps object bytes, and one object's file there: the data directory's objects/, or the S3 stand-in's files for its bucket. */
interface Place {
  readonly root: string;
  file(oid: string): string;
}
const diskPlace = (dataDir: string): Place => ({ root: join(dataDir, 'objects'), file: (oid) => join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid) });
const s3Place = (s3: S3Server): Place => {
  const root = join(s3.dir, s3.bucket, 'lfs', 'objects');
  return { root, file: (oid) => join(root, oid.slice(0, 2), oid.slice(2, 4), `${oid}._S3rver_object`) };
};

/** The data key id a stored copy's header names, or null for a copy in the clear. */
function dataKeyIdOf(path: string): string | null {
  const bytes = readFileSync(path);
  return looksEncrypted(bytes.subarray(0, HEADER_SIZE), bytes.byteLength) ? bytes.subarray(24, 40).toString('hex') : null;
}

/** Object files holding the marker, or a 64-byte run of a random object, in the clear. */
function plaintextFound(place: Place): string[] {
  const needles = [Buffer.from(MARK), ...blobs.filter((b) => !b.data.includes(MARK)).map((b) => b.data.subarray(1000, 1064))];
  const found: string[] = [];
  for (const e of readdirSync(place.root, { recursive: true, withFileTypes: true })) {
    if (!e.isFile() || e.name.endsWith('._S3rver_metadata.json')) continue;
    const bytes = readFileSync(join(e.parentPath, e.name));
    if (needles.some((n) => bytes.includes(n))) found.push(e.name);
  }
  return found;
}

async function everyObjectIntact(t: Test, server: RunningServer): Promise<void> {
  let intact = 0;
  for (const o of blobs) {
    const r = await http('GET', `${server.url}/acme/vault/objects/${o.oid}`, { headers: auth });
    if (r.status === 200 && createHash('sha256').update(r.body).digest('hex') === o.oid) intact++;
    else t.fail(`${o.oid} (${o.size} bytes): ${r.status}`);
  }
  t.equal(intact, blobs.length, `all ${blobs.length} objects read back intact`);
}

async function cli(server: RunningServer, ...args: string[]): Promise<Record<string, any>> {
  const { stdout } = await run(process.execPath, [CLI, ...args, 'acme/vault', '--json', '-q'], { env: { PATH: process.env.PATH ?? '', STOWAGE_URL: server.url, STOWAGE_TOKEN: 'tok-admin' } });
  return JSON.parse(stdout);
}

for (const backend of ['disk', 's3'] as const) t.test(`encrypt a store that ran in the clear, then rekey it: ${backend} store`, async (t) => {
  const dataDir = tmpDir();
  const s3 = backend === 's3' ? await startS3Server(tmpDir('stowage-s3-')) : null;
  if (s3 !== null) t.teardown(() => s3.stop());
  const place = s3 === null ? diskPlace(dataDir) : s3Place(s3);
  const storeEnv = { ...env, ...(s3?.env() ?? {}) };
  let server = await startServer(storeEnv, { dataDir });
  t.teardown(() => server.stop('SIGKILL'));
  for (const o of blobs) t.equal(await push(server.url, 'acme/vault', 'tok-push', o), 200, `stored in the clear: ${o.size} bytes`);
  // Small objects are acknowledged from the journal (disk); the job takes them once they have files of their own.
  for (const o of blobs) await waitForFile(place.file(o.oid));
  await server.stop();
  t.ok(plaintextFound(place).length > 0, 'before: the plaintext is in the store (the check can see it)');

  server = await startServer({ ...storeEnv, SVC_ENCRYPTION_KEY_FILE: keyFile }, { dataDir });
  await everyObjectIntact(t, server);
  const enc = await cli(server, 'encrypt');
  t.match(enc, { state: 'done', outcome: 'clean', kind: 'encrypt', objects: blobs.length, encrypted: blobs.length, rekeyed: 0, refused: 0, complete: true }, 'encrypt: every object written again, encrypted');
  t.same(plaintextFound(place), [], 'after encrypt: no object file holds known plaintext');
  const first = blobs.map((o) => dataKeyIdOf(place.file(o.oid)));
  t.ok(first.every((id) => id !== null), 'each copy names its data key');
  const compressible = blobs[2]!;
  const stats = (await http('GET', `${server.url}/acme/vault/objects/stats`, { headers: auth })).json();
  t.ok(stats.stored_bytes < stats.logical_bytes, `the compressed objects stayed compressed (${stats.stored_bytes} stored of ${stats.logical_bytes})`);
  const human = await run(process.execPath, [CLI, 'encrypt', 'acme/vault', '-q'], { env: { PATH: process.env.PATH ?? '', STOWAGE_URL: server.url, STOWAGE_TOKEN: 'tok-admin' } });
  t.match(human.stdout, new RegExp(`^ok acme/vault: 0 encrypted \\(0 B written\\), ${blobs.length} already encrypted, 0 skipped, 0 refused`), 'encrypt again: nothing left in the clear, as people read it');
  await everyObjectIntact(t, server);

  const rekey = await cli(server, 'rekey');
  t.match(rekey, { state: 'done', outcome: 'clean', kind: 'rekey', rekeyed: blobs.length, encrypted: 0, refused: 0, complete: true }, 'rekey: every object under a fresh data key');
  const second = blobs.map((o) => dataKeyIdOf(place.file(o.oid)));
  t.ok(second.every((id, i) => id !== null && id !== first[i]), 'each copy names a new data key');
  t.same(plaintextFound(place), [], 'after rekey: still no known plaintext');
  await everyObjectIntact(t, server);
  await server.stop();

  const index = openSqliteIndex(join(dataDir, 'index.sqlite'));
  t.teardown(() => index.close());
  const old = await Promise.all(first.map((id) => index.dataKeys.getDataKey(id!)));
  const now = await Promise.all(second.map((id) => index.dataKeys.getDataKey(id!)));
  t.ok(old.every((r) => r === null), 'the old data keys are deleted from the index');
  t.ok(now.every((r) => r !== null && r.kekId === 'k1'), 'the new ones are there, wrapped under k1');
  t.ok(readFileSync(place.file(compressible.oid)).byteLength < compressible.size, 'the compressible object is still stored compressed');
});

t.test('rekey and encrypt need admin, and keys', async (t) => {
  const server = await startServer(env);
  t.teardown(() => server.stop());
  for (const kind of ['rekey', 'encrypt']) {
    const by = (token: string) => http('POST', `${server.url}/acme/vault/objects/${kind}`, { headers: { authorization: basic(token), 'content-type': 'application/json' }, body: '{}' });
    t.equal((await by('tok-push')).status, 403, `${kind}: a pusher is refused`);
    const r = await by('tok-admin');
    t.equal(r.status, 404, `${kind}: without keys configured, 404`);
    t.match(r.json().message, /SVC_ENCRYPTION_KEY_FILE/, 'saying what to configure');
  }
});

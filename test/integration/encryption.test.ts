import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { KeyRing } from '../../src/crypto/key-ring.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { SegmentLog } from '../../src/store/journal/segment-log.js';
import { flipByte, textLike } from '../helpers/data.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, http } from '../helpers/lfs-http.js';
import { startS3Server } from '../helpers/s3-server.js';
import { MAIN, startServer, tmpDir, waitForFile, type RunningServer } from '../helpers/start-server.js';

// Encryption at rest from outside, with the real server: nothing uploaded is readable in any file
// of the data directory or any key of the bucket; a tampered object is never served and is healed
// by the next push after an audit; the start refuses keys it cannot use, one line, exit 2.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok-push', { login: 'dev', repos: { 'acme/game': 'push' } });
forge.tokens.set('tok-admin', { login: 'boss', repos: { 'acme/game': 'admin' } });
forge.tokens.set('tok-site', { login: 'ops', siteAdmin: true, repos: { 'acme/game': 'admin' } });
const as = (tok: string) => ({ authorization: basic(tok) });
const MiB = 1 << 20;
const oidOf = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

const keys = tmpDir('stowage-encryption-keys-');
/** A key file of `lines`, with `mode`. */
function keyFile(name: string, lines: string[], mode = 0o600): string {
  const path = join(keys, name);
  writeFileSync(path, `# test keys\n${lines.join('\n')}\n`, { mode });
  chmodSync(path, mode);
  return path;
}
const k1 = `k1 ${randomBytes(32).toString('base64')}`;
const k2 = `k2 ${randomBytes(32).toString('base64')}`;
const firstKeys = keyFile('first', [k1]);

async function put(server: RunningServer, data: Buffer): Promise<string> {
  const oid = oidOf(data);
  const res = await http('PUT', `${server.url}/acme/game/objects/${oid}`, { headers: as('tok-push'), body: data });
  if (res.status !== 200) throw new Error(`PUT ${res.status} ${res.body}`);
  return oid;
}
const get = (server: RunningServer, oid: string, range?: string) =>
  http('GET', `${server.url}/acme/game/objects/${oid}`, { headers: range === undefined ? as('tok-push') : { ...as('tok-push'), range } });

/** Objects with known markers: compressible and not, tiny, small (journal-sized) and multi-MiB. */
function markedObjects(tag: string): { name: string; marker: string; data: Buffer }[] {
  const m = (name: string): string => `PLAINTEXT-MARKER-${tag}-${name}-${randomBytes(6).toString('hex')}`;
  const withMarker = (body: Buffer, marker: string): Buffer => {
    const b = Buffer.from(body);
    for (let at = 0; at + marker.length < b.length; at += Math.max(marker.length, Math.floor(b.length / 7))) b.write(marker, at, 'latin1');
    return b;
  };
  return [
    ['tiny', (mk: string) => Buffer.from(`${mk} a tiny object`)],
    ['small-text', (mk: string) => withMarker(textLike(40_000, 3), mk)],
    ['small-random', (mk: string) => withMarker(randomBytes(200_000), mk)],
    ['large-text', (mk: string) => withMarker(textLike(5 * MiB + 17, 4), mk)],
    ['large-random', (mk: string) => withMarker(randomBytes(3 * MiB + 5), mk)],
  ].map(([name, make]) => {
    const marker = m(name as string);
    return { name: name as string, marker, data: (make as (mk: string) => Buffer)(marker) };
  });
}

/** Every file under `root`, recursively. */
function filesUnder(root: string): string[] {
  if (!existsSync(root)) return [];
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
}

/** The markers found in any file under `root` (as `marker in path`). */
function markersIn(root: string, markers: string[]): string[] {
  const found: string[] = [];
  for (const f of filesUnder(root)) {
    const bytes = readFileSync(f);
    for (const mk of markers) if (bytes.includes(mk, 0, 'latin1')) found.push(`${mk} in ${f}`);
  }
  return found;
}

/** Starts the server and expects it to refuse: its exit code and stderr. */
function refusedStart(dataDir: string, env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH ?? '', SVC_HOST: '127.0.0.1', SVC_PORT: '0', SVC_DATA_DIR: dataDir, SVC_FORGE_A_API_URL: forge.url, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout.on('data', (d: Buffer) => {
      if (d.toString().includes('"listening"')) child.kill('SIGKILL'); // it did not refuse: the assertions below fail
    });
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}


const objectFile = (dataDir: string, oid: string): string => join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);

t.test('disk store: no plaintext at rest, tampering never served, audit and push heal, keys checked at start', async (t) => {
  const dataDir = tmpDir();
  const env = { SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd:3', SVC_ENCRYPTION_KEY_FILE: firstKeys };
  let server = await startServer(env, { dataDir, keepData: true });
  t.teardown(() => server.stop());
  const objects = markedObjects('disk');
  for (const o of objects) await put(server, o.data);
  for (const o of objects) t.ok((await get(server, oidOf(o.data))).body.equals(o.data), `${o.name}: reads back`);
  const big = objects.find((o) => o.name === 'large-random')!.data;
  const range = await get(server, oidOf(big), `bytes=${MiB + 3}-${2 * MiB + 99}`);
  t.equal(range.status, 206);
  t.ok(range.body.equals(big.subarray(MiB + 3, 2 * MiB + 100)), 'a range from the middle');
  t.ok(markersIn(dataDir, ['a string that is not there']).length === 0 && filesUnder(dataDir).length > 0, 'the grep reads the data directory');
  t.same(markersIn(dataDir, objects.map((o) => o.marker)), [], 'no marker in any file of the data directory (objects, journal, index, staging)');

  // Tampering: a one-frame object and a byte in the middle of a multi-frame one.
  const small = objects.find((o) => o.name === 'small-text')!.data;
  await waitForFile(objectFile(dataDir, oidOf(small))); // journaled (sealed) first, then written out
  flipByte(objectFile(dataDir, oidOf(small)), 100);
  const smallGet = await get(server, oidOf(small));
  t.equal(smallGet.status, 500, 'a tampered object: the download fails before any byte is sent');
  t.match(smallGet.json(), { message: /damaged/ });
  flipByte(objectFile(dataDir, oidOf(big)), 2 * MiB);
  const bigGet = await get(server, oidOf(big)).catch((e: Error) => e);
  t.ok(bigGet instanceof Error || bigGet.status !== 200 || !bigGet.body.equals(big), 'a tampered large object is never served whole');
  t.notOk(!(bigGet instanceof Error) && bigGet.status === 200 && bigGet.body.length === big.length, 'never a 200 that finishes with other bytes');
  const audit = await http('POST', `${server.url}/acme/game/objects/audit`, {
    headers: { ...as('tok-admin'), 'content-type': 'application/json' },
    body: JSON.stringify({ quarantine: true }),
  });
  t.match(audit.json(), { objects: objects.length, ok: objects.length - 2, quarantined: 2, quarantine: 'applied' }, 'the audit finds both and quarantines them');
  t.equal((await get(server, oidOf(small))).status, 404, 'a quarantined object is not served');
  await put(server, small);
  await put(server, big);
  t.ok((await get(server, oidOf(small))).body.equals(small), 'healed by the next push');
  t.ok((await get(server, oidOf(big))).body.equals(big), 'the large one too');
  t.same(markersIn(dataDir, objects.map((o) => o.marker)), [], 'quarantined copies hold no plaintext either');
  t.equal(await server.stop(), 0);

  // Start refusals: one line naming the problem, exit 2, never listening.
  const refusals: [string, Record<string, string>, RegExp][] = [
    ['a group-readable key file', { SVC_ENCRYPTION_KEY_FILE: keyFile('group', [k1], 0o640) }, /readable by group or others/],
    ['a malformed key file', { SVC_ENCRYPTION_KEY_FILE: keyFile('bad', ['k1 not-base64']) }, /line 2: key k1 is not the base64 of 32 bytes/],
    ['an unreadable key file', { SVC_ENCRYPTION_KEY_FILE: join(keys, 'absent') }, /cannot read key file .*absent: ENOENT/],
    ['a failing key command', { SVC_ENCRYPTION_KEY_COMMAND: 'exit 3' }, /key command exited with status 3/],
    ['a ring without the key objects are under', { SVC_ENCRYPTION_KEY_FILE: keyFile('other', [k2]) }, /objects are encrypted under key k1 and the key ring lacks it/],
    ['no keys at all', {}, /objects are encrypted under key k1 and no encryption key is given/],
  ];
  for (const [what, keyEnv, why] of refusals) {
    const r = await refusedStart(dataDir, keyEnv);
    t.equal(r.code, 2, `${what}: exit 2`);
    t.match(r.stderr, why, `${what}: says why`);
    t.equal(r.stderr.trim().split('\n').length, 1, `${what}: one line`);
    t.notOk(r.stderr.includes(k1.split(' ')[1]!) || r.stderr.includes(k2.split(' ')[1]!), `${what}: no key material`);
  }

  // A new first key with the old one kept, and encryption off: old objects still read, new ones are plain.
  server = await startServer({ ...env, SVC_ENCRYPTION_KEY_FILE: keyFile('rotated', [k2, k1]), SVC_ENCRYPTION: 'off', SVC_COMPRESSION: 'off' }, { dataDir, keepData: true });
  for (const o of objects) t.ok((await get(server, oidOf(o.data))).body.equals(o.data), `${o.name}: reads with encryption off`);
  const plain = Buffer.from(`written with encryption off ${randomBytes(8).toString('hex')}`.repeat(3000));
  await put(server, plain);
  await waitForFile(objectFile(dataDir, oidOf(plain))); // journaled first, with encryption off
  t.ok(readFileSync(objectFile(dataDir, oidOf(plain))).equals(plain), 'a new object with encryption off is stored as it arrived');
  t.equal(await server.stop(), 0);
});

// The journal's segments hold small objects sealed under keys the ring wraps: a start that lacks
// such a key refuses as for the index's, though the index names no encrypted object yet.
t.test('a journal segment sealed under a key the ring lacks refuses the start, naming it', async (t) => {
  const dataDir = tmpDir();
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_ENCRYPTION_KEY_FILE: firstKeys }, { dataDir, keepData: true });
  t.equal(await server.stop(), 0);
  // What a crash leaves right after a small upload was acknowledged: its sealed record, no file yet.
  const journal = await SegmentLog.open(join(dataDir, 'journal'), Date.now, { ring: KeyRing.parse(k1), seal: true });
  const data = Buffer.from(`PLAINTEXT-MARKER-journal-${randomBytes(6).toString('hex')}`);
  await journal.append({ repo: 'acme/game', oid: oidOf(data) as never, size: data.length, data });
  await journal.close();
  for (const [what, keyEnv, why] of [
    ['a ring without its key', { SVC_ENCRYPTION_KEY_FILE: keyFile('journal-other', [k2]) }, /journal segments are sealed under key k1 \(.*seg-\d+\.log\) and the key ring lacks it/],
    ['no keys at all', {}, /journal segments are sealed under key k1 .* and no encryption key is given/],
  ] as const) {
    const r = await refusedStart(dataDir, keyEnv);
    t.equal(r.code, 2, `${what}: exit 2`);
    t.match(r.stderr, why, `${what}: says why`);
    t.equal(r.stderr.trim().split('\n').length, 1, `${what}: one line`);
  }
  const again = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_ENCRYPTION_KEY_FILE: keyFile('journal-rotated', [k2, k1]) }, { dataDir });
  t.teardown(() => again.stop());
  t.ok((await get(again, oidOf(data))).body.equals(data), 'with the key back, the sealed record replays and is served');
});

t.test('the compress job rewrites encrypted objects encrypted', async (t) => {
  const dataDir = tmpDir();
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_ENCRYPTION_KEY_FILE: firstKeys }, { dataDir });
  t.teardown(() => server.stop());
  const o = markedObjects('compress').find((x) => x.name === 'large-text')!;
  const oid = await put(server, o.data);
  const before = readFileSync(objectFile(dataDir, oid)).length;
  t.ok(before > o.data.length, 'stored uncompressed (compression off), sealed');
  const res = await http('POST', `${server.url}/acme/game/objects/compress`, { headers: { ...as('tok-admin'), 'content-type': 'application/json' }, body: '{}' });
  t.match(res.json(), { compressed: 1, refused: 0 }, 'compressed');
  t.ok(readFileSync(objectFile(dataDir, oid)).length < before / 2, 'the new copy is smaller');
  t.ok((await get(server, oid)).body.equals(o.data), 'and reads back');
  t.same(markersIn(dataDir, [o.marker]), [], 'no plaintext after the rewrite');
});

t.test('S3 store: no plaintext in any key of the bucket; transfers go through the server', async (t) => {
  const s3 = await startS3Server(tmpDir('stowage-encryption-s3-'));
  t.teardown(() => s3.stop());
  const server = await startServer({ ...s3.env({ SVC_S3_PREFIX: 'lfs', SVC_S3_PRESIGN: 'true' }), SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd:3', SVC_ENCRYPTION_KEY_FILE: firstKeys });
  t.teardown(() => server.stop());
  await server.waitForLog((l) => /a link would hand out ciphertext/.test(String(l.msg)), 'the presign warning');
  const objects = markedObjects('s3');
  for (const o of objects) await put(server, o.data);
  for (const o of objects) t.ok((await get(server, oidOf(o.data))).body.equals(o.data), `${o.name}: reads back`);
  const b = await http('POST', `${server.url}/acme/game/objects/batch`, {
    headers: { ...as('tok-push'), 'content-type': 'application/vnd.git-lfs+json', accept: 'application/vnd.git-lfs+json' },
    body: JSON.stringify({ operation: 'download', objects: [{ oid: oidOf(objects[0]!.data), size: objects[0]!.data.length }] }),
  });
  t.match(b.json().objects[0].actions.download.href, new RegExp(`^${server.url}/`), 'the download link is the server, not the bucket');
  t.ok(filesUnder(s3.dir).length > 0, 'the grep reads the bucket');
  t.same(markersIn(s3.dir, objects.map((o) => o.marker)), [], 'no marker in any key of the bucket');
  t.same(markersIn(server.dataDir, objects.map((o) => o.marker)), [], 'nor in the data directory');
});

t.test('dedupe and import with encryption on: the copies are sealed, and the index records their sealed size', async (t) => {
  const dataDir = tmpDir();
  const importDir = tmpDir('stowage-encryption-import-');
  const plant = (root: string, name: (oid: string) => string, data: Buffer): string => {
    const oid = oidOf(data);
    mkdirSync(join(root, oid.slice(0, 2), oid.slice(2, 4)), { recursive: true });
    writeFileSync(join(root, oid.slice(0, 2), oid.slice(2, 4), name(oid)), data);
    return oid;
  };
  const legacy = randomBytes(300_000);
  const imported = randomBytes(300_000);
  plant(join(dataDir, 'repos', 'acme', 'game'), (oid) => oid, legacy);
  plant(join(importDir, 'lfs'), (oid) => oid.slice(4), imported);
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_ENCRYPTION_KEY_FILE: firstKeys, SVC_IMPORT_DIR: importDir }, { dataDir });
  t.teardown(() => server.stop());
  const job = (kind: string, body: object) => http('POST', `${server.url}/acme/game/objects/${kind}`, { headers: { ...as('tok-site'), 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const deduped = await job('dedupe', {});
  t.equal(deduped.status, 200, deduped.body.toString());
  const res = await job('import', { layout: 'gitlab', source: 'lfs' });
  t.equal(res.status, 200, res.body.toString());
  const index = openSqliteIndex(join(dataDir, 'index.sqlite'));
  t.teardown(() => index.close());
  for (const [what, data] of [['deduped', legacy], ['imported', imported]] as const) {
    const file = objectFile(dataDir, oidOf(data));
    t.notOk(readFileSync(file).includes(data.subarray(1000, 1064)), `${what}: stored sealed`);
    t.ok((await get(server, oidOf(data))).body.equals(data), `${what}: reads back`);
    t.equal((await index.objects.findShared(oidOf(data) as never))?.storedSize, statSync(file).size, `${what}: the index records the sealed copy's size`);
  }
});

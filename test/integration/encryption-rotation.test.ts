import { execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { KeyRing } from '../../src/crypto/key-ring.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { textLike } from '../helpers/data.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { startS3Server } from '../helpers/s3-server.js';
import { basic, blobOf, http, push, type Blob } from '../helpers/lfs-http.js';
import { MAIN, startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';

// Key rotation and retirement, from outside, with real server processes: objects written under k1
// (small ones through the journal, larger ones as files; compressed and not), k2 put first, more
// objects, then `stowage rewrap`; k1 can leave the key file only after it, and then every object
// reads back intact. A rewrap killed mid-way leaves every row with a valid wrap, and running it
// again finishes it.

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const run = promisify(execFile);

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/vault', { private: true });
// A forge site admin: rewrap is a server administrator's act.
forge.tokens.set('tok-admin', { login: 'boss', siteAdmin: true, repos: { 'acme/vault': 'admin' } });
forge.tokens.set('tok-push', { login: 'dev', repos: { 'acme/vault': 'push' } });
const auth = { authorization: basic('tok-admin') };

// Before the first t.test (test/helpers/postgres.ts says why).
const pg = hasPostgres() ? await startPostgres((fn) => t.teardown(fn)) : null;

const K1 = `k1 ${randomBytes(32).toString('base64')}`;
const K2 = `k2 ${randomBytes(32).toString('base64')}`;
const keysDir = tmpDir('stowage-keys-');
const keyFile = join(keysDir, 'keys');
/** Writes the key file as an operator does: first key first, readable by the owner only. */
function keys(...lines: string[]): void {
  writeFileSync(keyFile, `# first key encrypts, all decrypt\n${lines.join('\n')}\n`, { mode: 0o600 });
}
const baseEnv = { SVC_FORGE_A_API_URL: forge.url, SVC_ENCRYPTION_KEY_FILE: keyFile, SVC_WORKERS: '2' };

/** Small ones go through the journal; compressible text and random bytes of each size. */
function objects(seed: number): Blob[] {
  return [
    blobOf(textLike(40_000, seed)),
    blobOf(randomBytes(30_000)),
    blobOf(textLike(3_000_000, seed + 1)),
    blobOf(randomBytes(2_500_000)),
  ];
}

async function everyObjectIntact(t: Test, server: RunningServer, all: Blob[]): Promise<void> {
  let intact = 0;
  for (const o of all) {
    const r = await http('GET', `${server.url}/acme/vault/objects/${o.oid}`, { headers: auth });
    if (r.status === 200 && createHash('sha256').update(r.body).digest('hex') === o.oid) intact++;
    else t.fail(`${o.oid} (${o.size} bytes): ${r.status}`);
  }
  t.equal(intact, all.length, `all ${all.length} objects read back intact (sha256)`);
}

/** The CLI against `server`, as a server administrator. */
function stowage(server: RunningServer, ...args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH ?? '', STOWAGE_URL: server.url, STOWAGE_TOKEN: 'tok-admin' } });
}

/** Starts the server on `dataDir` expecting a refusal: its exit status and stderr. */
function refusedStart(dataDir: string, env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN], { env: { PATH: process.env.PATH ?? '', SVC_HOST: '127.0.0.1', SVC_PORT: '0', SVC_DATA_DIR: dataDir, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout.on('data', (d: Buffer) => {
      if (d.toString().includes('"listening"')) child.kill('SIGKILL'); // it did not refuse: the test fails on the status
    });
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}

/** Every object file under the data directory's objects/ tree, with its content's sha256. */
function objectFiles(dataDir: string): Map<string, string> {
  const out = new Map<string, string>();
  const root = join(dataDir, 'objects');
  for (const e of readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    out.set(p, createHash('sha256').update(readFileSync(p)).digest('hex'));
  }
  return out;
}

t.test('rotate k1 → k2, rewrap, retire k1, restart: every object reads back', async (t) => {
  const dataDir = tmpDir();
  keys(K1);
  let server = await startServer({ ...baseEnv, SVC_COMPRESSION: 'zstd' }, { dataDir });
  t.teardown(() => server.stop('SIGKILL'));
  const underK1 = objects(1);
  for (const o of underK1) t.equal(await push(server.url, 'acme/vault', 'tok-push', o), 200, `under k1: ${o.size} bytes`);
  await server.stop();

  // Step 1 of the runbook: the new key goes first, the old one stays; restart.
  keys(K2, K1);
  server = await startServer({ ...baseEnv, SVC_COMPRESSION: 'off' }, { dataDir });
  const underK2 = objects(2);
  for (const o of underK2) t.equal(await push(server.url, 'acme/vault', 'tok-push', o), 200, `under k2: ${o.size} bytes`);
  await everyObjectIntact(t, server, [...underK1, ...underK2]);
  await server.stop();

  // Too early: objects are still wrapped under k1, so a key file without it is refused.
  keys(K2);
  const early = await refusedStart(dataDir, { ...baseEnv });
  t.equal(early.code, 2, 'removing k1 before rewrap: the server refuses to start, exit 2');
  t.match(early.stderr, /\bk1\b/, 'naming the missing key k1');
  t.notMatch(early.stderr, new RegExp(K1.split(' ')[1]!.slice(0, 16).replace(/[+/]/g, '.')), 'and never its material');

  keys(K2, K1);
  server = await startServer({ ...baseEnv }, { dataDir });
  const before = objectFiles(dataDir);
  // Small objects may still be in journal segments sealed under k1 (their keys are in the segments,
  // not in data_keys): rewrap writes those out, so k1 wraps nothing left on disk.
  const live = openSqliteIndex(join(dataDir, 'index.sqlite'));
  const rowsUnderK1 = (await live.dataKeys.dataKeysNotWrappedWith('k2', null, 1_000_000)).length;
  await live.close();
  const cli = await stowage(server, 'rewrap', '--json', '-q');
  const report = JSON.parse(cli.stdout);
  t.match(report, { state: 'done', outcome: 'clean', current_key: 'k2', unwrappable: 0, object_bytes_written: 0, keys_in_use: ['k2'], retirable_keys: ['k1'], complete: true }, 'rewrap: every data key now under k2, k1 retirable');
  t.ok(rowsUnderK1 > 0 && report.rewrapped === rowsUnderK1, `${report.rewrapped} data keys rewrapped: every row that was under k1 (${rowsUnderK1})`);
  const after = objectFiles(dataDir);
  t.ok([...before].every(([p, sum]) => after.get(p) === sum), `none of the ${before.size} object files was rewritten`);
  const again = JSON.parse((await stowage(server, 'rewrap', '--json', '-q')).stdout);
  t.match(again, { data_keys: 0, rewrapped: 0, keys_in_use: ['k2'] }, 'a second rewrap finds nothing to do');
  const { jobs } = JSON.parse((await stowage(server, 'jobs', '--server-wide', '--json')).stdout);
  t.match(jobs, [{ kind: 'rewrap', state: 'done', outcome: 'clean' }, { kind: 'rewrap', state: 'done' }], 'stowage jobs --server-wide lists both runs');
  const named = await stowage(server, 'rewrap', 'acme/vault').catch((e: { code: number; stderr: string }) => e);
  t.match(named, { code: 2, stderr: /works on the whole server/ }, 'rewrap naming a repository: usage error, exit 2');
  await server.stop();

  // Retire k1 and restart: everything still reads, here through OpenSSL's AES-GCM, whichever engine
  // (the CPU's vector one where it has it) wrote the objects.
  keys(K2);
  server = await startServer({ ...baseEnv, SVC_ENCRYPTION_CIPHER: 'openssl' }, { dataDir });
  t.ok(server.logs.some((l) => l.includes('"frame_cipher":"openssl"')), 'SVC_ENCRYPTION_CIPHER=openssl: the start-up line says OpenSSL opens the frames');
  await everyObjectIntact(t, server, [...underK1, ...underK2]);
});

t.test('rewrap needs a server administrator and keys', async (t) => {
  keys(K1);
  const server = await startServer({ ...baseEnv });
  t.teardown(() => server.stop());
  const post = (token: string) => http('POST', `${server.url}/-/objects/rewrap`, { headers: { authorization: basic(token), 'content-type': 'application/json' }, body: '{}' });
  t.equal((await post('tok-push')).status, 403, 'a pusher (no server admin) is refused');
  const noKeys = await startServer({ SVC_FORGE_A_API_URL: forge.url });
  t.teardown(() => noKeys.stop());
  const r = await http('POST', `${noKeys.url}/-/objects/rewrap`, { headers: { ...auth, 'content-type': 'application/json' }, body: '{}' });
  t.equal(r.status, 404, 'without keys configured: 404');
  t.match(r.json().message, /SVC_ENCRYPTION_KEY_FILE/, 'saying what to configure');
});

t.test('rewrap killed mid-way: every row keeps a valid wrap, and running it again finishes', async (t) => {
  const dataDir = tmpDir();
  keys(K1);
  let server = await startServer({ ...baseEnv }, { dataDir });
  t.teardown(() => server.stop('SIGKILL'));
  const real = [blobOf(randomBytes(20_000)), blobOf(textLike(2_000_000, 7))];
  for (const o of real) t.equal(await push(server.url, 'acme/vault', 'tok-push', o), 200, 'an object under k1');
  await server.stop();

  // Many data keys, so the job is far from its end when it is killed: rows as the layer writes
  // them (the index's own statement), wrapped under k1 by the key ring.
  const ROWS = 4000;
  const k1 = KeyRing.parse(`${K1}\n`);
  const plain = new Map<string, Buffer>();
  const index = openSqliteIndex(join(dataDir, 'index.sqlite'));
  for (let i = 0; i < ROWS; i++) {
    const id = randomBytes(16).toString('hex');
    const key = randomBytes(32);
    plain.set(id, key);
    const { kekId, wrapped } = k1.wrap(key, id);
    await index.dataKeys.putDataKey({ dataKeyId: id, kekId, wrapped });
  }
  await index.close();

  keys(K2, K1);
  const env = { ...baseEnv, SVC_REWRAP_BATCH: '10' };
  server = await startServer(env, { dataDir });
  const started = await http('POST', `${server.url}/-/objects/rewrap`, { headers: { ...auth, 'content-type': 'application/json' }, body: '{"wait": false}' });
  t.equal(started.status, 202, 'started without waiting');
  const href: string = started.json().href;
  t.match(href, /^\/-\/objects\/jobs\/[0-9a-f]+$/, 'its progress is a server-wide job');
  let seen = { objects_done: 0, objects_total: null as number | null, state: 'queued' };
  while (seen.objects_done < 100 && (seen.state === 'queued' || seen.state === 'running')) seen = (await http('GET', `${server.url}${href}`, { headers: auth })).json();
  t.equal(seen.state, 'running', `still running after ${seen.objects_done} of ${seen.objects_total} rows`);
  await server.stop('SIGKILL');

  // Between the kill and the restart: every row unwraps, under k1 or k2, to the data key it held.
  const ring = KeyRing.parse(`${K2}\n${K1}\n`);
  const check = openSqliteIndex(join(dataDir, 'index.sqlite'));
  let underK2 = 0;
  let valid = 0;
  for (const [id, key] of plain) {
    const row = (await check.dataKeys.getDataKey(id))!;
    if (row.kekId === 'k2') underK2++;
    if (ring.unwrap(row.kekId, id, row.wrapped).equals(key)) valid++;
  }
  const left = (await check.dataKeys.dataKeysNotWrappedWith('k2', null, ROWS + 100)).length;
  await check.close();
  t.equal(valid, ROWS, 'every row holds a valid wrap of its own data key');
  t.ok(underK2 >= seen.objects_done && underK2 < ROWS, `the kill came part-way: ${underK2} rows already under k2`);

  server = await startServer(env, { dataDir });
  const done = (await http('POST', `${server.url}/-/objects/rewrap`, { headers: { ...auth, 'content-type': 'application/json' }, body: '{}' })).json();
  t.match(done, { state: 'done', complete: true, rewrapped: left, data_keys: left, keys_in_use: ['k2'] }, `the second run rewraps the ${left} rows left, and only those`);
  await server.stop();

  keys(K2);
  server = await startServer(env, { dataDir });
  await everyObjectIntact(t, server, real);
});

t.test('a cluster on PostgreSQL and S3: k2 first on every node, rewrap through one node, retire k1', async (t) => {
  if (pg === null) {
    t.fail(POSTGRES_INSTALL_HINT);
    return;
  }
  const s3 = await startS3Server(tmpDir('stowage-s3-'));
  t.teardown(() => s3.stop());
  const env = { ...baseEnv, ...s3.env(), SVC_DATABASE_URL: await pg.createDatabase() };
  const dirs = [tmpDir(), tmpDir()];
  const nodes: RunningServer[] = [];
  t.teardown(() => Promise.all(nodes.map((n) => n.stop('SIGKILL'))));
  keys(K1);
  nodes.push(await startServer(env, { dataDir: dirs[0] }));
  const first = [blobOf(randomBytes(40_000)), blobOf(textLike(2_000_000, 9))];
  for (const o of first) t.equal(await push(nodes[0]!.url, 'acme/vault', 'tok-push', o), 200, 'under k1, through node 0');

  // Node 0 restarts with k2 first; node 1 joins with the same file.
  keys(K2, K1);
  await nodes[0]!.stop();
  nodes[0] = await startServer(env, { dataDir: dirs[0] });
  nodes.push(await startServer(env, { dataDir: dirs[1] }));
  const second = [blobOf(randomBytes(40_000)), blobOf(textLike(2_000_000, 10))];
  for (const o of second) t.equal(await push(nodes[1]!.url, 'acme/vault', 'tok-push', o), 200, 'under k2, through node 1');

  const report = (await http('POST', `${nodes[0]!.url}/-/objects/rewrap`, { headers: { ...auth, 'content-type': 'application/json' }, body: '{}' })).json();
  t.match(report, { state: 'done', outcome: 'clean', rewrapped: first.length, keys_in_use: ['k2'], retirable_keys: ['k1'], object_bytes_written: 0 }, 'rewrap through node 0 covers the data keys of the whole cluster');
  const seen = (await http('GET', `${nodes[1]!.url}/-/objects/jobs/${report.job}`, { headers: auth })).json();
  t.match(seen, { kind: 'rewrap', state: 'done', outcome: 'clean' }, 'node 1 shows the job from the shared index');

  // k1 leaves the file; node 0 restarts without it (node 1 still holds it: both read everything).
  keys(K2);
  await nodes[0]!.stop();
  nodes[0] = await startServer(env, { dataDir: dirs[0] });
  for (const n of nodes) await everyObjectIntact(t, n, [...first, ...second]);
});

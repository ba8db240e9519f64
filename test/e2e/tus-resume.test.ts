import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, rmSync, statSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { sha256File, writeRandomFile } from '../helpers/data.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { LFS, basic, blob, http } from '../helpers/lfs-http.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';
import { Sha256State } from '../../src/workers/sha256-state.js';

// Resumable uploads (tus) with the real git-lfs (Debian's 3.3.0, lfs.tustransfers=true), through a
// TCP proxy of the suite's own that cuts connections and counts the bytes that reach the server.
// One object over 1 GB (past the 1e9 Content-Length the main listener takes) is pushed to a fresh
// repository per case. STOWAGE_TUS_SIZE shrinks it while iterating.
const SIZE = Number(process.env.STOWAGE_TUS_SIZE ?? 1_100_000_000);

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
for (const r of ['studio/cut', 'studio/kill', 'studio/crash', 'studio/api', 'studio/other']) forge.repos.set(r, { private: true });
forge.tokens.set('tok-dev', { login: 'dev', repos: { 'studio/cut': 'push', 'studio/kill': 'push', 'studio/crash': 'push', 'studio/api': 'push' } });
forge.tokens.set('tok-pull', { login: 'viewer', repos: { 'studio/api': 'pull' } });
forge.tokens.set('tok-other', { login: 'eve', repos: { 'studio/other': 'push' } });

// Every request goes through the proxy: SVC_BASE_URL names it, and it forwards to the resumable-upload
// listener, which passes everything on to the main one.
const proxy = await startFaultProxy({ host: '127.0.0.1', port: 9 });
t.teardown(() => proxy.close());
const base = `http://127.0.0.1:${proxy.port}`;
const dataDir = tmpDir('stowage-tus-data-');
const env = { SVC_FORGE_A_API_URL: forge.url, SVC_TUS_PORT: '0', SVC_BASE_URL: base };

async function boot(): Promise<{ server: RunningServer; tusPort: number }> {
  const server = await startServer(env, { dataDir, keepData: true });
  const listening = await server.waitForLog((ev) => ev.msg === 'listening', 'listening');
  const tusPort = listening.tus_port as number;
  proxy.retarget('127.0.0.1', tusPort);
  return { server, tusPort };
}
let { server } = await boot();
t.teardown(() => server.stop());

const root = tmpDir('stowage-tus-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const sb = await GitSandbox.create(join(root, 'home'), base, 'tok-dev');
await sb.git(sb.home, 'config', '--global', 'lfs.tustransfers', 'true');

// The object, once: each case commits a hard link to it.
const bigPath = join(root, 'big.bin');
const bigSha = await writeRandomFile(bigPath, SIZE);

async function project(name: string): Promise<{ dir: string; remote: string; work: string }> {
  const dir = join(root, name);
  const { remote, work } = await sb.newProject(dir, `${base}/studio/${name}`);
  await sb.git(work, 'config', 'lfs.transfer.maxretries', '3');
  const { linkSync } = await import('node:fs');
  linkSync(bigPath, join(work, 'big.bin'));
  await sb.git(work, 'add', '.');
  await sb.git(work, 'commit', '-qm', 'big');
  return { dir, remote, work };
}

/** `git push` as a child of its own process group (so git-lfs under it can be killed with it). */
function gitPush(work: string, ...config: string[]): { pid: number; done: Promise<{ code: number | null; stderr: string }> } {
  const child = spawn('git', [...config.flatMap((c) => ['-c', c]), 'push', '-q', 'origin', 'main'], { cwd: work, env: sb.env, detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return { pid: child.pid!, done: new Promise((resolve) => child.once('close', (code) => resolve({ code, stderr }))) };
}

const stored = (sha: string): string => join(dataDir, 'objects', sha.slice(0, 2), sha.slice(2, 4), sha);
const partials = (): string[] => readdirSync(join(dataDir, 'uploads'));

t.test(`a ${SIZE} byte push cut once mid-body completes in the same git push, resending little`, async (t) => {
  const { work } = await project('cut');
  const start = proxy.bytesUp;
  let cuts = 0;
  proxy.cutAt(start + Math.floor(SIZE / 2), () => cuts++);
  const push = await gitPush(work).done;
  t.equal(push.code, 0, `git push succeeded: ${push.stderr}`);
  t.equal(cuts, 1, 'the connection was cut once');
  const sent = proxy.bytesUp - start;
  t.comment(`object ${SIZE} bytes, the server received ${sent} (${((sent / SIZE) * 100).toFixed(1)}%)`);
  t.ok(sent <= SIZE * 1.1, 'at most 10% more bytes than the object reached the server');
  t.equal(statSync(stored(bigSha)).size, SIZE, 'stored whole');
  t.same(partials(), [], 'no partial upload left');
});

t.test('git-lfs killed mid-object: the next push resumes from the reported offset', async (t) => {
  const { work } = await project('kill');
  const start = proxy.bytesUp;
  const first = gitPush(work);
  await proxy.upTo(start + Math.floor(SIZE * 0.4));
  process.kill(-first.pid, 'SIGKILL');
  await first.done;
  const firstSent = proxy.bytesUp - start;
  const mid = proxy.bytesUp;
  const again = await gitPush(work).done;
  t.equal(again.code, 0, `the second push succeeded: ${again.stderr}`);
  const secondSent = proxy.bytesUp - mid;
  t.comment(`first push sent ${firstSent}, the second ${secondSent} of ${SIZE}`);
  t.ok(secondSent <= SIZE - firstSent + SIZE * 0.05, 'the second push sent about what was missing');
  t.ok(secondSent < SIZE * 0.7, 'and not the whole object again');
  t.same(partials(), [], 'no partial upload left');
});

t.test('the server killed mid-PATCH: restarted on the same data, the push resumes, verifies, and a clone matches', async (t) => {
  const { dir, remote, work } = await project('crash');
  const start = proxy.bytesUp;
  // No retries: the push fails with the server, and is run again by hand once it is back.
  const first = gitPush(work, 'lfs.transfer.maxretries=0');
  await proxy.upTo(start + Math.floor(SIZE * 0.5));
  server.child.kill('SIGKILL');
  await server.stop();
  t.not((await first.done).code, 0, 'the first push failed with the server');
  const firstSent = proxy.bytesUp - start;
  ({ server } = await boot());

  // What HEAD reports survived the crash: no more than arrived, and not nothing.
  const head = await http('HEAD', `${base}/studio/crash/objects/tus/${bigSha}`, { headers: { authorization: basic('tok-dev'), 'tus-resumable': '1.0.0' } });
  t.equal(head.status, 200);
  const offset = Number(head.headers['upload-offset']);
  t.comment(`sent ${firstSent} before the kill; offset after the restart ${offset}`);
  t.ok(offset <= firstSent, 'the offset is durable bytes only');
  // Received bytes are synced every 64 MiB: a kill past the second sync leaves at least one behind.
  if (firstSent > 130 << 20) t.ok(offset > 0, 'and they survived the kill');
  t.equal(Number(head.headers['upload-length']), SIZE);

  const mid = proxy.bytesUp;
  const again = await gitPush(work).done;
  t.equal(again.code, 0, `the push run again succeeded: ${again.stderr}`);
  const secondSent = proxy.bytesUp - mid;
  t.ok(secondSent <= SIZE - offset + (4 << 20), `the second push sent what was missing (${secondSent})`);
  const clone = join(dir, 'clone');
  await sb.git(dir, 'clone', '-q', remote, clone);
  t.equal(await sha256File(join(clone, 'big.bin')), bigSha, 'the clone restored every byte');
});

t.test('the tus routes refuse what they must, and nothing partial is ever visible', async (t) => {
  const api = `${base}/studio/api/objects`;
  const h = (tok: string, more: Record<string, string> = {}): Record<string, string> => ({ authorization: basic(tok), 'tus-resumable': '1.0.0', ...more });
  const offer = async (oid: string, size: number): Promise<string> => {
    const res = await http('POST', `${api}/batch`, {
      headers: { authorization: basic('tok-dev'), 'content-type': LFS, accept: LFS },
      body: JSON.stringify({ operation: 'upload', transfers: ['basic', 'tus'], objects: [{ oid, size }], hash_algo: 'sha256' }),
    });
    t.equal(res.status, 200);
    t.equal(res.json().transfer, 'tus', 'a client offering tus gets tus');
    return res.json().objects[0].actions.upload.href as string;
  };
  const patch = (href: string, tok: string, offset: number, body: Buffer) =>
    http('PATCH', href, { headers: h(tok, { 'upload-offset': String(offset), 'content-type': 'application/offset+octet-stream' }), body });
  const visible = async (oid: string, size: number): Promise<{ batch: number | undefined; get: number }> => {
    const b = await http('POST', `${api}/batch`, {
      headers: { authorization: basic('tok-dev'), 'content-type': LFS, accept: LFS },
      body: JSON.stringify({ operation: 'download', objects: [{ oid, size }] }),
    });
    const g = await http('GET', `${api}/${oid}`, { headers: { authorization: basic('tok-dev') } });
    return { batch: b.json().objects[0].error?.code, get: g.status };
  };

  const basicBatch = await http('POST', `${api}/batch`, {
    headers: { authorization: basic('tok-dev'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ operation: 'upload', transfers: ['basic'], objects: [{ oid: blob(10).oid, size: 10 }] }),
  });
  t.equal(basicBatch.json().transfer, 'basic', 'a client that does not offer tus gets basic');

  const b = blob(3 << 20);
  const href = await offer(b.oid, b.size);
  t.equal(href, `${base}/studio/api/objects/tus/${b.oid}`);
  t.equal((await http('OPTIONS', href)).headers['tus-version'], '1.0.0', 'OPTIONS names the version');
  t.equal((await http('HEAD', href, { headers: { authorization: basic('tok-dev'), 'tus-resumable': '0.2.2' } })).status, 412, 'another tus version: 412');
  const head0 = await http('HEAD', href, { headers: h('tok-dev') });
  t.equal(head0.headers['upload-offset'], '0');
  t.equal(head0.headers['upload-length'], String(b.size));

  t.equal((await patch(href, 'tok-pull', 0, b.data)).status, 403, 'a pull-only token may not PATCH');
  t.equal((await http('HEAD', href, { headers: h('tok-pull') })).status, 403, 'nor HEAD');
  const foreign = await patch(href, 'tok-other', 0, b.data);
  t.equal(foreign.status, 404, `a token of another repository cannot use this repository's href: ${foreign.body}`);
  const own = await patch(`${base}/studio/other/objects/tus/${b.oid}`, 'tok-other', 0, b.data);
  t.equal(own.status, 404, `nor resume it under its own repository: ${own.body}`);
  const wrong = await patch(href, 'tok-dev', 5, b.data.subarray(5));
  t.equal(wrong.status, 409, 'a wrong offset: 409');
  t.equal(wrong.headers['upload-offset'], '0', 'naming the offset held');
  const past = await patch(href, 'tok-dev', 0, Buffer.concat([b.data, Buffer.alloc(10)]));
  t.equal(past.status, 413, 'a PATCH past the announced size: 413');
  t.equal((await http('HEAD', href, { headers: h('tok-dev') })).headers['upload-offset'], '0', 'and nothing of it kept');

  const half = b.size >> 1;
  const p1 = await patch(href, 'tok-dev', 0, b.data.subarray(0, half));
  t.equal(p1.status, 204);
  t.equal(p1.headers['upload-offset'], String(half));
  t.same(await visible(b.oid, b.size), { batch: 404, get: 404 }, 'a partial upload is invisible to batch and GET');
  const metrics = (await http('GET', `${base}/metrics`)).body.toString();
  const rewind = await patch(href, 'tok-dev', 0, b.data);
  t.equal(rewind.status, 409, 'an offset before the bytes held: 409 too');
  t.equal(rewind.headers['upload-offset'], String(half), 'naming the offset held');
  t.match(metrics, /^svc_partial_uploads 1$/m, 'counted in the metrics');
  t.match(metrics, new RegExp(`^svc_partial_upload_bytes ${half}$`, 'm'));
  const p2 = await patch(href, 'tok-dev', half, b.data.subarray(half));
  t.equal(p2.status, 204);
  t.equal(p2.headers['upload-offset'], String(b.size));
  const got = await http('GET', `${api}/${b.oid}`, { headers: { authorization: basic('tok-dev') } });
  t.equal(got.status, 200);
  t.ok(got.body.equals(b.data), 'the object is stored as sent');

  const bad = blob(1 << 20);
  const badHref = await offer(bad.oid, bad.size);
  const liar = await patch(badHref, 'tok-dev', 0, blob(bad.size).data);
  t.equal(liar.status, 422, 'bytes that do not hash to the oid: 422');
  t.same(await visible(bad.oid, bad.size), { batch: 404, get: 404 }, 'nothing stored');

  const gone = blob(1 << 20);
  const goneHref = await offer(gone.oid, gone.size);
  t.equal((await patch(goneHref, 'tok-dev', 0, gone.data.subarray(0, 1000))).status, 204);
  t.equal((await http('DELETE', goneHref, { headers: h('tok-dev') })).status, 204, 'termination');
  t.equal((await http('HEAD', goneHref, { headers: h('tok-dev') })).status, 404, 'then no upload is there');
});

t.test('partial uploads untouched for SVC_UPLOAD_RESUME_TTL are swept', async (t) => {
  const b = blob(2 << 20);
  const res = await http('POST', `${base}/studio/api/objects/batch`, {
    headers: { authorization: basic('tok-dev'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ operation: 'upload', transfers: ['basic', 'tus'], objects: [{ oid: b.oid, size: b.size }] }),
  });
  const href = res.json().objects[0].actions.upload.href as string;
  const headers = { authorization: basic('tok-dev'), 'tus-resumable': '1.0.0', 'upload-offset': '0', 'content-type': 'application/offset+octet-stream' };
  t.equal((await http('PATCH', href, { headers, body: b.data.subarray(0, 4096) })).status, 204);
  t.equal(partials().length, 2, 'a data file and its state record');
  await server.stop();
  // Four days ago: past the default TTL of three; the sweep at start takes them.
  const past = new Date(Date.now() - 4 * 86400_000);
  for (const name of partials()) utimesSync(join(dataDir, 'uploads', name), past, past);
  ({ server } = await boot());
  t.same(partials(), [], 'swept at start');
  t.equal((await http('HEAD', href, { headers: { authorization: basic('tok-dev'), 'tus-resumable': '1.0.0' } })).status, 404, 'the upload is gone');
});

t.test('the hash state after the durable offset is kept with it, and the upload goes on from it after a restart', async (t) => {
  const b = blob((1 << 20) + 37); // the durable offset ends inside a 64-byte block
  const res = await http('POST', `${base}/studio/api/objects/batch`, {
    headers: { authorization: basic('tok-dev'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ operation: 'upload', transfers: ['basic', 'tus'], objects: [{ oid: b.oid, size: b.size }] }),
  });
  const href = res.json().objects[0].actions.upload.href as string;
  const headers = (offset: number) => ({ authorization: basic('tok-dev'), 'tus-resumable': '1.0.0', 'upload-offset': String(offset), 'content-type': 'application/offset+octet-stream' });
  const cut = b.size - 1000;
  t.equal((await http('PATCH', href, { headers: headers(0), body: b.data.subarray(0, cut) })).status, 204);
  await server.stop();
  const record = partials().find((n) => n.endsWith('.state'))!;
  const saved = JSON.parse(readFileSync(join(dataDir, 'uploads', record), 'utf8').trimEnd()) as { synced: number; hash: string };
  t.equal(saved.synced, cut, 'the durable offset');
  const expected = new Sha256State();
  expected.update(b.data.subarray(0, cut));
  t.equal(saved.hash, Buffer.from(expected.save()).toString('base64'), 'the sha256 state of exactly those bytes, beside it');
  ({ server } = await boot());
  t.equal((await http('PATCH', href, { headers: headers(cut), body: b.data.subarray(cut) })).status, 204, 'resumed after the restart');
  const got = await http('GET', `${base}/studio/api/objects/${b.oid}`, { headers: { authorization: basic('tok-dev') } });
  t.ok(got.status === 200 && got.body.equals(b.data), 'verified from the kept state and stored as sent');
  t.same(partials(), [], 'nothing partial left');
});

import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, batch, blob, http, push, schemaErrors } from '../helpers/lfs-http.js';
import { waitForDir } from '../helpers/fs-events.js';
import { startServer, waitForFile } from '../helpers/start-server.js';
import { capped } from '../helpers/wait-for.js';

// One forge and one server for the file: a real server process on a real port, a real SQLite file.
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.repos.set('acme/other', { private: true });
forge.tokens.set('tok-admin', { login: 'alice', repos: { 'acme/game': 'admin', 'acme/other': 'admin' } });
forge.tokens.set('tok-writer', { login: 'wendy', repos: { 'acme/game': 'push' } });
forge.tokens.set('tok-reader', { login: 'rita', repos: { 'acme/game': 'pull' } });
forge.tokens.set('tok-outsider', { login: 'olga', repos: {} });
forge.tokens.set('tok-app', { login: 'bot', kind: 'installation', repos: { 'acme/game': 'pull' } });

// Request lines (SVC_LOG_REQUESTS) are how a test knows the server has answered.
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_CHUNKED_UPLOAD_THRESHOLD: '100000', SVC_LOG_REQUESTS: 'true' });
t.teardown(() => server.stop());
const base = server.url;
const GAME = 'acme/game';
const staging = join(server.dataDir, 'staging');

const errorBody = (t: Test, res: Awaited<ReturnType<typeof http>>, status: number): void => {
  t.equal(res.status, status, `status ${status}`);
  t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/, 'LFS media type');
  const body = res.json();
  t.type(body.message, 'string', 'message');
  t.type(body.request_id, 'string', 'request_id');
  t.equal(res.headers['x-request-id'], body.request_id, 'request id also a header');
};

t.test('health and ready are open', async (t) => {
  t.equal((await http('GET', `${base}/health`)).status, 200);
  t.equal((await http('GET', `${base}/ready`)).status, 200);
});

t.test('batch negotiation', async (t) => {
  const a = blob(1000);
  const res = await batch(base, GAME, 'tok-writer', 'upload', [{ oid: a.oid, size: a.size }]);
  t.equal(res.status, 200);
  t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/);
  const body = res.json();
  t.equal(schemaErrors('http-batch-response-schema.json', body), null, 'validates against the official schema');
  t.equal(body.transfer, 'basic');
  t.equal(body.hash_algo, 'sha256');
  const o = body.objects[0];
  t.same([o.oid, o.size], [a.oid, a.size], 'echoes oid and size');
  t.equal(o.actions.upload.href, `${base}/${GAME}/objects/${a.oid}`);
  t.notOk(o.actions.verify, 'no verify action: the PUT itself verifies and is durable before its 200');
  t.not(o.authenticated, true, 'never authenticated for links back to this server');
  t.notOk(o.actions.upload.header, 'small objects upload with Content-Length');

  t.equal(await push(base, GAME, 'tok-writer', a), 200);
  const again = (await batch(base, GAME, 'tok-writer', 'upload', [{ oid: a.oid, size: a.size }])).json();
  t.notOk(again.objects[0].actions, 'present object has no actions');
  t.notOk(again.objects[0].error);

  const missing = blob(10);
  const dl = await batch(base, GAME, 'tok-reader', 'download', [{ oid: a.oid, size: a.size }, { oid: missing.oid, size: 10 }]);
  t.equal(dl.status, 200, 'batch still 200');
  const [found, lost] = dl.json().objects;
  t.equal(found.actions.download.href, `${base}/${GAME}/objects/${a.oid}`);
  t.same(lost, { oid: missing.oid, size: 10, error: { code: 404, message: 'Object does not exist' } });
  t.equal(schemaErrors('http-batch-response-schema.json', dl.json()), null);
});

t.test('batch: header values are strings and large objects go chunked', async (t) => {
  const res = await batch(base, GAME, 'tok-writer', 'upload', [{ oid: 'b'.repeat(64), size: 5 * 1024 ** 3 }]);
  const header = res.json().objects[0].actions.upload.header;
  t.same(header, { 'Transfer-Encoding': 'chunked', 'X-Lfs-Object-Size': String(5 * 1024 ** 3) });
  for (const v of Object.values(header)) t.type(v, 'string');
});

t.test('batch: bad input', async (t) => {
  const url = `${base}/${GAME}/objects/batch`;
  const auth = basic('tok-writer');
  errorBody(t, await http('POST', url, { headers: { authorization: auth, 'content-type': LFS }, body: '{"operation":' }), 400);
  errorBody(t, await http('POST', url, { headers: { authorization: auth, 'content-type': 'text/plain' }, body: '{}' }), 415);
  errorBody(t, await http('POST', url, { headers: { authorization: auth, 'content-type': LFS, accept: 'text/html' }, body: '{}' }), 406);
  errorBody(t, await http('POST', url, { headers: { authorization: auth, 'content-type': LFS }, body: '{"operation":"steal","objects":[]}' }), 422);
  errorBody(t, await http('POST', url, { headers: { authorization: auth, 'content-type': LFS }, body: 'x'.repeat(2 << 20) }), 413);
  const many = Array.from({ length: 1001 }, (_, i) => ({ oid: createHash('sha256').update(String(i)).digest('hex'), size: 1 }));
  errorBody(t, await batch(base, GAME, 'tok-writer', 'upload', many), 413);
  const ok1000 = await batch(base, GAME, 'tok-writer', 'download', many.slice(0, 1000));
  t.equal(ok1000.json().objects.length, 1000, '1000 objects are fine and all answered');

  const mixed = await batch(base, GAME, 'tok-writer', 'upload', [
    { oid: 'NOT-AN-OID', size: 1 },
    { oid: 'c'.repeat(64), size: -5 },
    { oid: 'd'.repeat(64), size: 2 ** 70 },
    { oid: 'e'.repeat(64), size: 7 },
  ]);
  t.equal(mixed.status, 200);
  const objs = mixed.json().objects;
  t.same(objs.map((o: any) => o.error?.code ?? 'ok'), [422, 422, 422, 'ok'], 'bad entries answered per object, good one served');
  t.same(objs.map((o: any) => o.oid), ['NOT-AN-OID', 'c'.repeat(64), 'd'.repeat(64), 'e'.repeat(64)], 'every requested oid echoed');

  const md5 = await batch(base, GAME, 'tok-writer', 'upload', [{ oid: 'f'.repeat(64), size: 1 }], { hash_algo: 'md5' });
  t.equal(md5.status, 200);
  t.equal(md5.json().objects[0].error.code, 409, 'unsupported hash_algo: 409 per batch.md');
  t.equal(md5.json().hash_algo, 'sha256');

  const noRef = await http('POST', url, { headers: { authorization: auth, 'content-type': LFS }, body: JSON.stringify({ operation: 'download', objects: [], ref: {} }) });
  t.equal(noRef.status, 200, 'no charset, ref {} and no transfers are fine');
  t.equal(noRef.json().transfer, 'basic');

  // batch.md: the answer's transfer must be one the client offered; none of ours offered: refused.
  const tus = await batch(base, GAME, 'tok-writer', 'upload', [{ oid: 'e'.repeat(64), size: 7 }], { transfers: ['tus', 'lfs-standalone-file'] });
  errorBody(t, tus, 422);
  t.match(tus.json().message, /"tus", "lfs-standalone-file".*basic/, 'names what was offered and what is spoken');
  t.notOk(tus.json().objects, 'an error answer has no objects');
  const withBasic = await batch(base, GAME, 'tok-writer', 'upload', [{ oid: 'e'.repeat(64), size: 7 }], { transfers: ['tus', 'basic'] });
  t.equal(withBasic.json().transfer, 'basic', 'basic among others: basic');
  t.same(objs[1].size, -5, 'a negative size is echoed as sent in its error entry');
});

t.test('HEAD of an object answers as GET, without the body', async (t) => {
  const a = blob(12345);
  t.equal(await push(base, GAME, 'tok-writer', a), 200);
  const url = `${base}/${GAME}/objects/${a.oid}`;
  const get = await http('GET', url, { headers: { authorization: basic('tok-reader') } });
  const head = await http('HEAD', url, { headers: { authorization: basic('tok-reader') } });
  t.equal(head.status, 200);
  t.equal(head.body.length, 0, 'no body');
  for (const h of ['content-length', 'content-type', 'accept-ranges']) t.equal(head.headers[h], get.headers[h], `${h} as GET says`);
  t.equal(head.headers['content-length'], '12345');
  const ranged = await http('HEAD', url, { headers: { authorization: basic('tok-reader'), range: 'bytes=0-9' } });
  t.equal(ranged.status, 200, 'Range is ignored on HEAD (RFC 9110 §14.2)');
  const anon = await http('HEAD', url);
  t.equal(anon.status, 401, 'the same permission as GET');
  t.equal(anon.body.length, 0, 'errors have no body either');
  t.ok(Number(anon.headers['content-length']) > 0, 'but say the length of the body GET would get');
  t.equal(anon.headers['lfs-authenticate'], 'Basic realm="Stowage"');
  const missing = await http('HEAD', `${base}/${GAME}/objects/${'9'.repeat(64)}`, { headers: { authorization: basic('tok-reader') } });
  t.equal(missing.status, 404);
  const allow = await http('DELETE', url, { headers: { authorization: basic('tok-reader') } });
  t.equal(allow.status, 405);
  t.match(allow.headers.allow, /HEAD/, 'Allow names HEAD');
});

t.test('authentication and authorization', async (t) => {
  const a = blob(100);
  const none = await batch(base, GAME, null, 'download', [{ oid: a.oid, size: a.size }]);
  errorBody(t, none, 401);
  t.equal(none.headers['lfs-authenticate'], 'Basic realm="Stowage"');
  t.equal(none.headers['www-authenticate'], 'Basic realm="Stowage"');
  errorBody(t, await batch(base, GAME, 'tok-nonsense', 'download', []), 401);
  errorBody(t, await batch(base, GAME, 'tok-reader', 'upload', [{ oid: a.oid, size: a.size }]), 403);
  errorBody(t, await batch(base, GAME, 'tok-outsider', 'download', []), 404);
  errorBody(t, await batch(base, GAME, 'tok-app', 'upload', []), 403);
  t.equal((await batch(base, GAME, 'tok-app', 'download', [])).status, 200, 'installation token: read only');
  const put = await http('PUT', `${base}/${GAME}/objects/${a.oid}`, { headers: { authorization: basic('tok-reader') }, body: a.data });
  errorBody(t, put, 403);
  const bearer = await http('POST', `${base}/${GAME}/objects/batch`, {
    headers: { authorization: 'Bearer tok-reader', 'content-type': LFS },
    body: JSON.stringify({ operation: 'download', objects: [] }),
  });
  t.equal(bearer.status, 200, 'Bearer works too');
  const anonGet = await http('GET', `${base}/${GAME}/objects/${a.oid}`);
  errorBody(t, anonGet, 401);
});

t.test('path traversal and malformed paths are refused', async (t) => {
  for (const path of [
    `/%2e%2e/game/objects/batch`,
    `/acme/..%2f..%2fetc/objects/batch`,
    `/acme/game/objects/..%2f..%2findex.sqlite`,
    `/acme/game/objects/${'A'.repeat(64)}`,
    `/acme/game/objects/${'a'.repeat(63)}`,
    `/.hidden/game/objects/${'a'.repeat(64)}`,
  ]) {
    const res = await http(path.endsWith('batch') ? 'POST' : 'GET', `${base}${path}`, { headers: { authorization: basic('tok-admin'), 'content-type': LFS }, body: path.endsWith('batch') ? '{"operation":"download","objects":[]}' : undefined });
    t.equal(res.status, 404, path);
    t.type(res.json().message, 'string');
  }
  t.equal((await http('GET', `${base}/nowhere`)).status, 404);
});

t.test('PUT stores, GET serves whole and by Range', async (t) => {
  const a = blob(300_000);
  const put = await http('PUT', `${base}/${GAME}/objects/${a.oid}`, { headers: { authorization: basic('tok-writer'), 'content-type': 'text/plain; charset=utf-8' }, body: a.data });
  t.equal(put.status, 200, 'any sniffed Content-Type is accepted');
  const get = (range?: string) => http('GET', `${base}/${GAME}/objects/${a.oid}`, { headers: { authorization: basic('tok-reader'), ...(range ? { range } : {}) } });
  const whole = await get();
  t.equal(whole.status, 200);
  t.ok(whole.body.equals(a.data), 'whole object byte for byte');
  t.equal(whole.headers['content-length'], String(a.size));

  const cases: [string, number, number][] = [['bytes=0-9', 0, 9], ['bytes=299990-', 299_990, 299_999], ['bytes=-100', 299_900, 299_999], ['bytes=1000-999999', 1000, 299_999]];
  for (const [range, s, e] of cases) {
    const r = await get(range);
    t.equal(r.status, 206, range);
    t.equal(r.headers['content-range'], `bytes ${s}-${e}/${a.size}`);
    t.ok(r.body.equals(a.data.subarray(s, e + 1)), `${range} bytes`);
  }
  const unsat = await get('bytes=300000-');
  errorBody(t, unsat, 416);
  t.equal(unsat.headers['content-range'], `bytes */${a.size}`, 'real size');
  for (const junk of ['bytes=5-1', 'bytes=abc', 'lines=1-2', 'bytes=0-1,4-5']) {
    const r = await get(junk);
    t.equal(r.status, 200, `${junk} ignored`);
    t.equal(r.body.length, a.size);
  }
  const verify = (oid: string, size: number) => http('POST', `${base}/${GAME}/objects/verify`, { headers: { authorization: basic('tok-writer'), 'content-type': LFS }, body: JSON.stringify({ oid, size }) });
  t.equal((await verify(a.oid, a.size)).status, 200);
  errorBody(t, await verify(a.oid, a.size + 1), 422);
  errorBody(t, await verify('0'.repeat(64), 1), 404);
  errorBody(t, await verify('zz', 1), 422);
});

t.test('an empty object', async (t) => {
  const e = blob(0);
  t.equal((await http('PUT', `${base}/${GAME}/objects/${e.oid}`, { headers: { authorization: basic('tok-writer') }, body: Buffer.alloc(0) })).status, 200);
  const r = await http('GET', `${base}/${GAME}/objects/${e.oid}`, { headers: { authorization: basic('tok-writer') } });
  t.equal(r.status, 200);
  t.equal(r.body.length, 0);
  t.equal((await http('GET', `${base}/${GAME}/objects/${e.oid}`, { headers: { authorization: basic('tok-writer'), range: 'bytes=0-' } })).status, 416);
});

t.test('mismatches are refused and leave nothing behind', async (t) => {
  const a = blob(50_000);
  const wrongBytes = Buffer.from(a.data);
  wrongBytes[100] ^= 0xff;
  errorBody(t, await http('PUT', `${base}/${GAME}/objects/${a.oid}`, { headers: { authorization: basic('tok-writer') }, body: wrongBytes }), 422);
  const chunkedShort = await http('PUT', `${base}/${GAME}/objects/${a.oid}`, {
    headers: { authorization: basic('tok-writer'), 'x-lfs-object-size': String(a.size + 1) },
    body: (async function* () { yield a.data; })(),
  });
  errorBody(t, chunkedShort, 422);
  const chunkedLong = await http('PUT', `${base}/${GAME}/objects/${a.oid}`, {
    headers: { authorization: basic('tok-writer'), 'x-lfs-object-size': String(a.size - 1) },
    body: (async function* () { yield a.data; })(),
  });
  errorBody(t, chunkedLong, 422);
  t.equal((await http('GET', `${base}/${GAME}/objects/${a.oid}`, { headers: { authorization: basic('tok-writer') } })).status, 404, 'not stored');
  t.same(readdirSync(staging).filter((f) => !f.startsWith('.')), [], 'no staging litter');
  t.notOk(existsSync(join(server.dataDir, 'objects', a.oid.slice(0, 2), a.oid.slice(2, 4), a.oid)), 'no object file');
});

t.test('a chunked upload with the announced size is stored', async (t) => {
  const a = blob(250_000);
  const res = await batch(base, GAME, 'tok-writer', 'upload', [{ oid: a.oid, size: a.size }]);
  const action = res.json().objects[0].actions.upload;
  t.equal(action.header['Transfer-Encoding'], 'chunked', 'threshold lowered for this test');
  // undici sends an async-iterable body chunked by itself and refuses an explicit Transfer-Encoding.
  const { 'Transfer-Encoding': _te, ...headers } = action.header;
  const put = await http('PUT', action.href, {
    headers: { authorization: basic('tok-writer'), ...headers },
    body: (async function* () { for (let i = 0; i < a.size; i += 65536) yield a.data.subarray(i, i + 65536); })(),
  });
  t.equal(put.status, 200);
  const got = await http('GET', action.href, { headers: { authorization: basic('tok-writer') } });
  t.ok(got.body.equals(a.data));
});

t.test('a client that disconnects mid-upload leaves nothing behind', async (t) => {
  const a = blob(2_000_000);
  const sock = connect(server.port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  sock.write(`PUT /${GAME}/objects/${a.oid} HTTP/1.1\r\nHost: x\r\nAuthorization: ${basic('tok-writer')}\r\nContent-Length: ${a.size}\r\n\r\n`);
  sock.write(a.data.subarray(0, 1_000_000));
  const mine = (names: string[]): string[] => names.filter((f) => f.startsWith(a.oid));
  await waitForDir(staging, (names) => mine(names).length > 0);
  t.equal(mine(readdirSync(staging)).length, 1, 'staging file exists while the upload runs');
  sock.destroy();
  await waitForDir(staging, (names) => mine(names).length === 0);
  t.same(readdirSync(staging).filter((f) => f.startsWith(a.oid)), [], 'staging file removed');
  t.equal((await http('GET', `${base}/${GAME}/objects/${a.oid}`, { headers: { authorization: basic('tok-writer') } })).status, 404);
  t.equal((await http('GET', `${base}/health`)).status, 200, 'server fine');
});


// git-lfs's first PUT to an href goes out without credentials and learns from the 401 to send them
// (https://github.com/git-lfs/git-lfs/blob/v3.3.0/lfsapi/auth.go). A large body is still streaming when the 401 is written: if the
// server cut the connection then, the reset would throw the answer away before the client read it
// (git-lfs would see only "connection reset", retry with backoff and never send credentials).
t.test('a refusal answered mid-body reaches a client that is still sending', async (t) => {
  const mark = server.logs.length;
  const sock = connect(server.port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  sock.pause(); // reads nothing until it has sent what it meant to send, as a busy writer would
  let got = '';
  let error: string | null = null;
  sock.on('data', (d: Buffer) => (got += d.toString('latin1')));
  sock.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? String(e)));
  sock.write(`PUT /${GAME}/objects/${'a'.repeat(64)} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Lfs-Object-Size: 1073741824\r\n\r\n`);
  const chunk = Buffer.alloc(1 << 20, 1);
  for (let i = 0; i < 8; i++) sock.write(Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]));
  // Read only once the server has answered (its request log line follows the answer): the answer is
  // then surely written while the body is still coming.
  await server.waitForLog((ev) => ev.msg === 'request' && ev.route === 'upload' && ev.status === 401, 'the 401 to the unauthenticated PUT', mark);
  // The answer is whole when its JSON body has ended, or the connection is gone (the checks below say which).
  const answered = capped(new Promise<void>((resolve) => {
    sock.on('data', () => /\r\n\r\n\{.*\}$/s.test(got) && resolve());
    sock.once('close', () => resolve());
  }), 'the 401 to be read');
  sock.resume();
  await answered;
  t.match(got, /^HTTP\/1\.1 401 /, 'the 401 was read');
  t.match(got, /\r\nconnection: close\r\n/i, 'it says the connection will close');
  t.match(got, /\r\n\r\n\{"message":"[^"]+","request_id":"[^"]+"\}$/, 'with the Git LFS error body, whole');
  t.equal(error, null, 'no reset before the answer was read');
  sock.destroy();
  t.equal((await http('GET', `${base}/health`)).status, 200, 'server fine');
});
t.test('concurrent PUTs of one oid both succeed and store it once', async (t) => {
  const a = blob(3_000_000);
  const put = () => http('PUT', `${base}/${GAME}/objects/${a.oid}`, { headers: { authorization: basic('tok-writer') }, body: a.data });
  const results = await Promise.all([put(), put(), put()]);
  t.same(results.map((r) => r.status), [200, 200, 200]);
  const dir = join(server.dataDir, 'objects', a.oid.slice(0, 2), a.oid.slice(2, 4));
  t.same(readdirSync(dir).filter((f) => f.startsWith(a.oid)), [a.oid], 'one file');
});

t.test('proof of possession: a second repository never sees the first one\'s objects', async (t) => {
  const secret = blob(4096);
  t.equal(await push(base, GAME, 'tok-admin', secret), 200);
  const dl = (await batch(base, 'acme/other', 'tok-admin', 'download', [{ oid: secret.oid, size: secret.size }])).json();
  t.equal(dl.objects[0].error.code, 404, 'batch download: missing in the other repository');
  const up = (await batch(base, 'acme/other', 'tok-admin', 'upload', [{ oid: secret.oid, size: secret.size }])).json();
  t.ok(up.objects[0].actions?.upload, 'batch upload still asks for the bytes');
  t.equal((await http('GET', `${base}/acme/other/objects/${secret.oid}`, { headers: { authorization: basic('tok-admin') } })).status, 404, 'GET refused');
  const v = await http('POST', `${base}/acme/other/objects/verify`, { headers: { authorization: basic('tok-admin'), 'content-type': LFS }, body: JSON.stringify({ oid: secret.oid, size: secret.size }) });
  t.equal(v.status, 404, 'verify refused');
  // Wrong bytes under a known oid do not make the other repository a holder.
  const fake = Buffer.alloc(secret.size, 1);
  t.equal((await http('PUT', `${base}/acme/other/objects/${secret.oid}`, { headers: { authorization: basic('tok-admin') }, body: fake })).status, 422);
  t.equal((await http('GET', `${base}/acme/other/objects/${secret.oid}`, { headers: { authorization: basic('tok-admin') } })).status, 404);
  // Real bytes prove possession: a reference is added, no second copy.
  t.equal(await push(base, 'acme/other', 'tok-admin', secret), 200);
  const got = await http('GET', `${base}/acme/other/objects/${secret.oid}`, { headers: { authorization: basic('tok-admin') } });
  t.ok(got.body.equals(secret.data));
  const dir = join(server.dataDir, 'objects', secret.oid.slice(0, 2), secret.oid.slice(2, 4));
  await waitForFile(join(dir, secret.oid)); // small: journaled first, its own file follows
  t.same(readdirSync(dir).filter((f) => f.startsWith(secret.oid)), [secret.oid], 'one copy');
});

t.test('one forge lookup serves many requests with the same token', async (t) => {
  forge.tokens.set('tok-cache', { login: 'carl', repos: { 'acme/game': 'push' } });
  const before = forge.lookups.filter((l) => l.token === 'tok-cache').length;
  for (let i = 0; i < 20; i++) await batch(base, GAME, 'tok-cache', 'download', []);
  t.equal(forge.lookups.filter((l) => l.token === 'tok-cache').length - before, 1);
});

t.test('metrics are exposed', async (t) => {
  const res = await http('GET', `${base}/metrics`);
  t.equal(res.status, 200);
  t.match(res.body.toString(), /svc_requests_total\{route="batch",status="200"\} \d+/);
  t.match(res.body.toString(), /svc_transfer_bytes_total\{direction="upload"\} \d+/);
});

t.test('a known path with the wrong method is 405 with Allow', async (t) => {
  const res = await http('DELETE', `${base}/${GAME}/objects/batch`);
  t.equal(res.status, 405);
  t.match(String(res.headers.allow), /POST/);
  t.type(res.json().message, 'string');
  t.equal((await http('DELETE', `${base}/${GAME}/objects/${'a'.repeat(64)}`)).status, 405);
});

t.test('a keep-alive connection stays usable after uploads around the 1 MiB hold-back', async (t) => {
  const { Agent, request } = await import('undici');
  const agent = new Agent({ connections: 1, pipelining: 1 });
  t.teardown(() => agent.close());
  for (const size of [1048576 - 1, 1048576, 1048576 + 7, 1048576 + 65536, 2097152 + 7]) {
    for (let round = 0; round < 3; round++) {
      const a = blob(size);
      const put = await request(`${base}/${GAME}/objects/${a.oid}`, { dispatcher: agent, method: 'PUT', headers: { authorization: basic('tok-writer') }, body: a.data });
      await put.body.text();
      t.equal(put.statusCode, 200, `PUT ${size}`);
      const next = await request(`${base}/health`, { dispatcher: agent, headersTimeout: 3000, bodyTimeout: 3000 });
      await next.body.text();
      t.equal(next.statusCode, 200, `next request on the same connection after ${size} bytes`);
    }
  }
});

t.test('large uploads: stored when right, refused when one byte is wrong', async (t) => {
  const big = blob(20 * 1024 * 1024 + 3);
  const put = (data: Buffer) => http('PUT', `${base}/${GAME}/objects/${big.oid}`, { headers: { authorization: basic('tok-writer') }, body: data });
  const wrong = Buffer.from(big.data);
  wrong[wrong.length - 1] ^= 1;
  errorBody(t, await put(wrong), 422);
  t.equal((await http('GET', `${base}/${GAME}/objects/${big.oid}`, { headers: { authorization: basic('tok-writer') } })).status, 404, 'wrong bytes not stored');
  t.same(readdirSync(staging).filter((f) => f.startsWith(big.oid)), [], 'no staging litter');
  const chunked = await http('PUT', `${base}/${GAME}/objects/${big.oid}`, {
    headers: { authorization: basic('tok-writer') }, // size unknown: chunked without X-Lfs-Object-Size
    body: (async function* () { for (let i = 0; i < big.size; i += 1 << 20) yield big.data.subarray(i, i + (1 << 20)); })(),
  });
  t.equal(chunked.status, 200, 'chunked upload of unknown size');
  const got = await http('GET', `${base}/${GAME}/objects/${big.oid}`, { headers: { authorization: basic('tok-reader') } });
  t.ok(got.body.equals(big.data), 'served byte for byte');
  const concurrent = await Promise.all([1, 2, 3].map(() => { const b = blob(9 * 1024 * 1024); return http('PUT', `${base}/${GAME}/objects/${b.oid}`, { headers: { authorization: basic('tok-writer') }, body: b.data }); }));
  t.same(concurrent.map((r) => r.status), [200, 200, 200], 'concurrent large uploads');
});

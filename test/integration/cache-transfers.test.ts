import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, batch, blob, http, push, schemaErrors, type Blob } from '../helpers/lfs-http.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';
import { startWanProxy } from '../helpers/wan-proxy.js';

// Cache mode over real HTTP: an upstream Stowage node on its own data dir and port, reached only
// through a byte-counting proxy, and a cache node in front of it. Assertions are on bytes over the
// upstream link, never on durations.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.repos.set('acme/other', { private: true });
forge.tokens.set('tok-writer', { login: 'wendy', repos: { 'acme/game': 'push', 'acme/other': 'push' } });
forge.tokens.set('tok-bob', { login: 'bob', repos: { 'acme/game': 'push' } });
forge.tokens.set('tok-outsider', { login: 'olga', repos: {} });
forge.tokens.set('tok-root', { login: 'root', siteAdmin: true, repos: {} });

// The upstream's links must point through the proxy too: its base URL is the proxy's.
const target = { host: '127.0.0.1', port: 0 };
const link = await startWanProxy(target);
t.teardown(() => link.close());
const upstream = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_BASE_URL: `http://127.0.0.1:${link.port}` });
t.teardown(() => upstream.stop());
target.port = upstream.port;

const MiB = 1 << 20;
const cacheEnv = {
  SVC_UPSTREAM_LFS_URL: `http://127.0.0.1:${link.port}/{org}/{repo}`,
  SVC_CACHE_MAX_SIZE: String(10 * MiB),
  SVC_DISK_RESERVE: '0',
  SVC_METRICS_TOKEN: 'metrics-token-0123456789',
  // The dashboard's administrators (the cache's own sign-in; objects stay the upstream's to grant).
  SVC_FORGE_A_API_URL: forge.url,
};
let cache: RunningServer = await startServer(cacheEnv, { keepData: true });
t.teardown(() => cache.stop());

const GAME = 'acme/game';
const cachedPath = (oid: string): string => join(cache.dataDir, 'cache', 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);

/** A download batch through the cache, then the GET of its link: status and body. */
async function fetchThrough(b: Blob, token: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Buffer; href: string }> {
  const res = await batch(cache.url, GAME, token, 'download', [{ oid: b.oid, size: b.size }]);
  if (res.status !== 200) return { status: res.status, body: res.body, href: '' };
  const href = res.json().objects[0].actions.download.href as string;
  const got = await http('GET', href, { headers: { authorization: basic(token), ...headers } });
  return { status: got.status, body: got.body, href };
}

t.test('a push through the cache reaches the upstream before its 200', async (t) => {
  const b = blob(300_000);
  const res = await batch(cache.url, GAME, 'tok-writer', 'upload', [{ oid: b.oid, size: b.size }]);
  t.equal(res.status, 200);
  const body = res.json();
  t.equal(schemaErrors('http-batch-response-schema.json', body), null, 'validates against the official schema');
  const href = body.objects[0].actions.upload.href as string;
  t.ok(href.startsWith(`${cache.url}/${GAME}/objects/${b.oid}?l=`), 'the upload link points at the cache');
  t.notOk(body.objects[0].actions.verify, 'the cache verifies with the upstream itself');
  t.notMatch(href, /tok-writer/, 'the link carries no credential');
  const before = link.bytesUp;
  const put = await http('PUT', href, { headers: { authorization: basic('tok-writer'), 'content-type': 'application/octet-stream' }, body: b.data });
  t.equal(put.status, 200);
  t.ok(link.bytesUp - before >= b.size, 'the bytes crossed the upstream link');
  // Straight from the upstream: the object is there, byte for byte.
  const direct = await batch(upstream.url, GAME, 'tok-writer', 'download', [{ oid: b.oid, size: b.size }]);
  const got = await http('GET', direct.json().objects[0].actions.download.href, { headers: { authorization: basic('tok-writer') } });
  t.ok(got.body.equals(b.data), 'the upstream holds the bytes');
  t.ok(existsSync(cachedPath(b.oid)), 'and the cache keeps a copy');
});

t.test('a link replayed with other credentials, for another repository or altered is refused', async (t) => {
  const b = blob(50_000);
  t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  t.equal(await push(upstream.url, 'acme/other', 'tok-writer', b), 200);
  const { status, href } = await fetchThrough(b, 'tok-writer');
  t.equal(status, 200);
  const refused = async (url: string, token: string | null, what: string): Promise<void> => {
    const res = await http('GET', url, { headers: token === null ? {} : { authorization: basic(token) } });
    // Without credentials: 401 with a challenge, so git-lfs sends the ones it holds.
    t.equal(res.status, token === null ? 401 : 403, what);
    if (token === null) t.match(String(res.headers['lfs-authenticate'] ?? res.headers['www-authenticate']), /Basic/, `${what}: a challenge`);
    t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/, `${what}: LFS body`);
    t.notOk(res.body.includes(b.data.subarray(0, 64)), `${what}: no object bytes`);
  };
  await refused(href, 'tok-bob', 'another credential (that may read the repository)');
  await refused(href, null, 'no credential');
  await refused(href.replace('/acme/game/', '/acme/other/'), 'tok-writer', 'another repository');
  await refused(href.replace(/.(?=[^.]*$)/, (c) => (c === 'A' ? 'B' : 'A')), 'tok-writer', 'an altered signature');
  await refused(href.split('?')[0]!, 'tok-writer', 'no link at all');
});

t.test('a credential the upstream refuses gets nothing, also for cached objects', async (t) => {
  const b = blob(40_000);
  t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  t.equal((await fetchThrough(b, 'tok-writer')).status, 200, 'cached now');
  t.ok(existsSync(cachedPath(b.oid)));
  for (const token of ['tok-outsider', 'not-a-token']) {
    const res = await batch(cache.url, GAME, token, 'download', [{ oid: b.oid, size: b.size }]);
    t.not(res.status, 200, `${token}: the upstream's refusal`);
    t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/);
    t.type(res.json().message, 'string');
    t.notOk(res.body.includes(b.oid.slice(0, 16)) && res.json().objects, 'no objects');
  }
});

t.test('a second download crosses the upstream link as JSON only; ranges come from the cache', async (t) => {
  const b = blob(2 * MiB);
  t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  const d0 = link.bytesDown;
  const first = await fetchThrough(b, 'tok-writer');
  t.equal(first.status, 200);
  t.ok(first.body.equals(b.data), 'cold: the bytes');
  t.ok(link.bytesDown - d0 >= b.size, 'cold: the object crossed the link');
  const d1 = link.bytesDown;
  const second = await fetchThrough(b, 'tok-writer');
  t.ok(second.body.equals(b.data), 'warm: the bytes');
  t.ok(link.bytesDown - d1 < 16_384, `warm: ${link.bytesDown - d1} bytes over the link (the batch answer only)`);
  const range = await fetchThrough(b, 'tok-writer', { range: 'bytes=1000-1999' });
  t.equal(range.status, 206);
  t.ok(range.body.equals(b.data.subarray(1000, 2000)), 'the range');
  const metrics = await http('GET', `${cache.url}/metrics`, { headers: { authorization: 'Bearer metrics-token-0123456789' } });
  const text = metrics.body.toString();
  t.match(text, /svc_cache_hits_total [1-9]/, 'hits counted');
  t.match(text, /svc_cache_bytes_served_total\{source="upstream"\} [1-9]/, 'bytes from the upstream counted');
  t.match(text, /svc_cache_repository_hits_total\{repository="acme\/game"\} [1-9]/, 'per repository, with the token');
  const open = (await http('GET', `${cache.url}/metrics`)).body.toString();
  t.notMatch(open, /svc_cache_repository_hits_total/, 'per-repository series need the metrics token');
  t.match(open, /svc_cache_hits_total/);
});

t.test('HEAD of a download link answers its size and fills nothing', async (t) => {
  const b = blob(200_000);
  t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  const res = await batch(cache.url, GAME, 'tok-writer', 'download', [{ oid: b.oid, size: b.size }]);
  const href = res.json().objects[0].actions.download.href as string;
  const d0 = link.bytesDown;
  const head = await http('HEAD', href, { headers: { authorization: basic('tok-writer') } });
  t.equal(head.status, 200);
  t.equal(head.headers['content-length'], String(b.size), 'the object size');
  t.equal(head.body.length, 0, 'no body');
  t.ok(link.bytesDown - d0 < 1024, 'nothing fetched from the upstream');
  t.notOk(existsSync(cachedPath(b.oid)), 'nothing cached');
  t.equal((await http('HEAD', href, { headers: { authorization: basic('tok-bob') } })).status, 403, 'another credential: refused');
  t.equal((await http('HEAD', href.replace(GAME, 'acme/other'), { headers: { authorization: basic('tok-writer') } })).status, 403, 'another repository: refused');
  t.equal((await http('HEAD', href)).status, 401, 'no credential: asked for one');
});

t.test('jobs, imports and tus are refused with a clear error; the repository page shows its hit ratio', async (t) => {
  const refusals: [string, string][] = [
    ['POST', 'objects/audit'],
    ['POST', 'objects/retain'],
    ['POST', 'objects/import'],
    ['GET', 'objects/jobs'],
    ['GET', 'objects/jobs/abc'],
    ['OPTIONS', `objects/tus/${'a'.repeat(64)}`],
  ];
  for (const [method, path] of refusals) {
    const body = method === 'POST' ? '{}' : undefined;
    const res = await http(method, `${cache.url}/${GAME}/${path}`, { headers: { authorization: basic('tok-root'), accept: LFS, 'content-type': 'application/json' }, body });
    t.equal(res.status, 501, `${method} ${path}`);
    t.match(res.json(), { message: /cache/, request_id: String }, `${method} ${path}: the LFS error body says why`);
  }
  const b = blob(30_000);
  t.equal(await push(upstream.url, 'acme/other', 'tok-writer', b), 200);
  const get = async (token: string): Promise<{ status: number; body: Buffer }> => {
    const r = await batch(cache.url, 'acme/other', token, 'download', [{ oid: b.oid, size: b.size }]);
    const got = await http('GET', r.json().objects[0].actions.download.href as string, { headers: { authorization: basic(token) } });
    return { status: got.status, body: got.body };
  };
  for (let i = 0; i < 3; i++) t.equal((await get('tok-writer')).status, 200);
  const stats = await http('GET', `${cache.url}/acme/other/objects/stats`, { headers: { authorization: basic('tok-writer') } });
  t.equal(stats.status, 200);
  t.match(stats.json(), { repository: 'acme/other', hits: 2, misses: 1, hit_ratio: 0.6667 }, "the repository's own figures");
  const page = await http('GET', `${cache.url}/acme/other`, { headers: { authorization: basic('tok-writer') } });
  t.equal(page.status, 200);
  t.match(page.body.toString(), /data-field="hit_ratio" value="0.6667"/, 'the page shows its hit ratio');
  t.notMatch(page.body.toString(), /acme\/game/, 'and no other repository');
  for (const token of ['tok-bob', 'tok-outsider']) {
    const refused = await http('GET', `${cache.url}/acme/other`, { headers: { authorization: basic(token) } });
    t.not(refused.status, 200, `${token}: the upstream says no, so does the page`);
    t.notMatch(refused.body.toString(), /hit_ratio/);
  }
  const anonymous = await http('GET', `${cache.url}/acme/other/objects/stats`);
  t.equal(anonymous.status, 401, 'no credential: asked for one');
  t.ok(anonymous.headers['www-authenticate'] ?? anonymous.headers['lfs-authenticate'], 'with a challenge');
});

t.test('the dashboard shows the cache figures to a server administrator only', async (t) => {
  const overview = await http('GET', `${cache.url}/-/api/overview`, { headers: { authorization: basic('tok-root') } });
  t.equal(overview.status, 200);
  const c = overview.json().cache;
  t.ok(c.hits >= 2 && c.misses >= 1, `hits ${c.hits}, misses ${c.misses}`);
  t.equal(c.hit_ratio, Math.round((c.hits / (c.hits + c.misses)) * 10_000) / 10_000);
  t.ok(c.bytes_served_from_cache > 0 && c.bytes_served_from_upstream > 0 && c.bytes_fetched_from_upstream > 0, 'bytes by source');
  t.equal(c.fills_in_flight, 0);
  t.type(c.evictions, 'number');
  t.ok(c.repositories.some((r: { repository: string }) => r.repository === 'acme/other'), 'per repository');
  for (const token of ['tok-writer', 'tok-outsider']) {
    const refused = await http('GET', `${cache.url}/-/api/overview`, { headers: { authorization: basic(token) } });
    t.equal(refused.status, 403, `${token}: not a server administrator`);
    t.notMatch(refused.body.toString(), /acme\/other/, 'no repository named');
  }
  const signIn = await http('POST', `${cache.url}/-/api/session`, { headers: { 'content-type': 'application/json', origin: new URL(cache.url).origin }, body: JSON.stringify({ token: 'tok-root' }) });
  t.equal(signIn.status, 201);
  const cookie = String(signIn.headers['set-cookie']).split(';')[0]!;
  const page = (await http('GET', `${cache.url}/-/`, { headers: { cookie } })).body.toString();
  t.match(page, /<h2>Cache<\/h2>/, 'the dashboard has a cache section');
  t.match(page, new RegExp(`data-field="cache_hit_ratio" value="${c.hit_ratio}"`), 'with the hit ratio');
  t.match(page, /data-repository="acme\/other"/, 'and the repositories');
});

t.test('concurrent downloads of an object the cache lacks share one upstream fetch', async (t) => {
  const b = blob(3 * MiB);
  t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  const d0 = link.bytesDown;
  const all = await Promise.all([0, 1, 2, 3].map(() => fetchThrough(b, 'tok-writer')));
  for (const r of all) t.ok(r.status === 200 && r.body.equals(b.data), 'each client gets the bytes');
  const crossed = link.bytesDown - d0;
  t.ok(crossed >= b.size && crossed < b.size + 64 * 1024, `${crossed} bytes over the link for 4 clients of ${b.size}`);
});

t.test('a fill cut mid-way leaves nothing in the cache and gives no whole answer', async (t) => {
  const b = blob(3 * MiB);
  t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  link.cutDownAt(link.bytesDown + MiB);
  const res = await fetchThrough(b, 'tok-writer').catch((e: Error) => ({ status: -1, body: Buffer.alloc(0), href: String(e) }));
  await link.cut;
  t.not(res.status === 200 && res.body.equals(b.data), true, 'no whole answer');
  t.notOk(res.status === 200 && res.body.length === b.size, 'never a 200 of the full length');
  t.notOk(existsSync(cachedPath(b.oid)), 'nothing cached');
  t.same(readdirSync(join(cache.dataDir, 'cache', 'fills')), [], 'no staging file left');
  const again = await fetchThrough(b, 'tok-writer');
  t.ok(again.status === 200 && again.body.equals(b.data), 'the next try fills it');
  t.ok(existsSync(cachedPath(b.oid)));
});

t.test('the cache stays under SVC_CACHE_MAX_SIZE, least recently used out first', async (t) => {
  const blobs = [blob(3 * MiB), blob(3 * MiB), blob(3 * MiB), blob(3 * MiB)];
  for (const b of blobs) t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  for (const b of blobs) t.equal((await fetchThrough(b, 'tok-writer')).status, 200);
  t.notOk(existsSync(cachedPath(blobs[0]!.oid)), 'the oldest is evicted');
  t.ok(existsSync(cachedPath(blobs[3]!.oid)), 'the newest is kept');
  const metrics = (await http('GET', `${cache.url}/metrics`)).body.toString();
  t.match(metrics, /svc_cache_evictions_total [1-9]/);
});

t.test('an object larger than the whole cache passes through, never kept', async (t) => {
  const big = blob(11 * MiB);
  const res = await batch(cache.url, GAME, 'tok-writer', 'upload', [{ oid: big.oid, size: big.size }]);
  const put = await http('PUT', res.json().objects[0].actions.upload.href, { headers: { authorization: basic('tok-writer') }, body: big.data });
  t.equal(put.status, 200, 'written through');
  t.notOk(existsSync(cachedPath(big.oid)), 'not kept after the upload');
  const d0 = link.bytesDown;
  const got = await fetchThrough(big, 'tok-writer');
  t.ok(got.status === 200 && got.body.equals(big.data), 'served from the upstream');
  t.ok(link.bytesDown - d0 >= big.size, 'over the link');
  t.notOk(existsSync(cachedPath(big.oid)), 'not kept after the download');
  t.same(readdirSync(join(cache.dataDir, 'cache', 'fills')), [], 'no staging file left');
});

t.test('a restart keeps what was cached', async (t) => {
  const b = blob(1 * MiB);
  t.equal(await push(upstream.url, GAME, 'tok-writer', b), 200);
  t.equal((await fetchThrough(b, 'tok-writer')).status, 200);
  await cache.stop();
  cache = await startServer(cacheEnv, { dataDir: cache.dataDir });
  const d0 = link.bytesDown;
  const again = await fetchThrough(b, 'tok-writer');
  t.ok(again.status === 200 && again.body.equals(b.data), 'served');
  t.ok(link.bytesDown - d0 < 16_384, 'from the cache, not the upstream');
});

t.test('locks are relayed: a lock taken through the cache holds upstream', async (t) => {
  const call = (srv: string, method: 'GET' | 'POST', path: string, token: string, body?: unknown) =>
    http(method, `${srv}/${GAME}${path}`, {
      headers: { accept: LFS, authorization: basic(token), ...(body === undefined ? {} : { 'content-type': LFS }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const created = await call(cache.url, 'POST', '/locks', 'tok-writer', { path: 'art/hero.psd' });
  t.equal(created.status, 201);
  const id = created.json().lock.id as string;
  const listed = await call(upstream.url, 'GET', '/locks?path=art%2Fhero.psd', 'tok-writer');
  t.equal(listed.json().locks[0].id, id, 'upstream holds it');
  const taken = await call(cache.url, 'POST', '/locks', 'tok-bob', { path: 'art/hero.psd' });
  t.equal(taken.status, 409, "someone else's lock refused as upstream");
  t.equal(taken.json().lock.id, id);
  const verify = await call(cache.url, 'POST', '/locks/verify', 'tok-bob', {});
  t.equal(verify.json().theirs[0].id, id, 'verify relayed');
  const unlocked = await call(cache.url, 'POST', `/locks/${id}/unlock`, 'tok-writer', {});
  t.equal(unlocked.status, 200);
  t.equal((await call(upstream.url, 'GET', '/locks', 'tok-writer')).json().locks.length, 0, 'gone upstream');
});

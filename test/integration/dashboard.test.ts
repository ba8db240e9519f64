import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, LFS, push } from '../helpers/lfs-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

/**
 * Dashboard API against the real server: sign-in for forge admins only, the cookie's attributes,
 * the overview figures, and the access settings — saved, enforced at once, persisted across a
 * restart, reset to the environment's defaults — with the same-origin check on cookie calls.
 */

const REPO = 'acme/widgets';

function setCookie(res: { headers: Record<string, string | string[] | undefined> }): string {
  const h = res.headers['set-cookie'];
  return Array.isArray(h) ? h[0]! : (h ?? '');
}

async function forge(t: { teardown(fn: () => unknown): void }): Promise<GitHubEmulator> {
  const f = new GitHubEmulator();
  await f.start();
  t.teardown(() => f.stop());
  f.repos.set(REPO, { private: true });
  f.repos.set('acme/tools', { private: true });
  f.repos.set('other/thing', { private: true });
  f.repos.set('ops/stowage', { private: true });
  f.tokens.set('root', { login: 'root', siteAdmin: true, repos: {} });
  f.tokens.set('opsadmin', { login: 'olga', repos: { 'ops/stowage': 'admin' } });
  f.tokens.set('opswriter', { login: 'oscar', repos: { 'ops/stowage': 'push' } });
  f.tokens.set('writer', { login: 'wendy', repos: { [REPO]: 'push', 'acme/tools': 'push', 'other/thing': 'push' } });
  return f;
}

t.test('sign-in, session cookie and who may use the dashboard', async (t) => {
  const f = await forge(t);
  const server = await startServer({ SVC_FORGE_A_API_URL: f.url, SVC_ADMIN_REPO: 'ops/stowage', SVC_SESSION_TTL: '2h' });
  t.teardown(() => server.stop());
  const base = server.url;
  const json = { 'content-type': 'application/json' };

  // Not admins: a writer of some repository, a writer (not admin) of the admin repository, a bad token.
  const notAdmin = await http('POST', `${base}/-/api/session`, { headers: json, body: JSON.stringify({ token: 'writer' }) });
  t.equal(notAdmin.status, 403);
  t.match(notAdmin.json().message, /administrator/);
  t.equal((await http('POST', `${base}/-/api/session`, { headers: json, body: JSON.stringify({ token: 'opswriter' }) })).status, 403);
  const bad = await http('POST', `${base}/-/api/session`, { headers: json, body: JSON.stringify({ token: 'nonsense' }) });
  t.equal(bad.status, 401);
  t.equal(bad.headers['www-authenticate'], undefined, 'no Basic challenge: a browser fetch must not pop up a dialog');
  t.equal((await http('POST', `${base}/-/api/session`, { headers: json, body: '{}' })).status, 422);
  t.equal((await http('POST', `${base}/-/api/session`, { headers: json, body: 'nope' })).status, 400);
  // Login CSRF: a foreign Origin is refused even with a good token.
  t.equal((await http('POST', `${base}/-/api/session`, { headers: { ...json, origin: 'https://evil.example' }, body: JSON.stringify({ token: 'root' }) })).status, 403);

  // A forge site admin.
  const signIn = await http('POST', `${base}/-/api/session`, { headers: { ...json, origin: base }, body: JSON.stringify({ token: 'root' }) });
  t.equal(signIn.status, 201);
  t.match(signIn.json(), { signed_in: true, user: { name: 'root' }, via: 'site_admin' });
  const cookie = setCookie(signIn);
  t.match(cookie, /^stowage_session=[A-Za-z0-9_-]{43}; /);
  t.match(cookie, /; HttpOnly/);
  t.match(cookie, /; SameSite=Strict/);
  t.match(cookie, /; Path=\/-\//);
  t.match(cookie, /; Max-Age=7200/);
  t.notMatch(cookie, /Secure/, 'plain http base URL: no Secure flag');
  const sid = cookie.slice('stowage_session='.length, cookie.indexOf(';'));
  const expires = Date.parse(signIn.json().expires_at);
  t.ok(Math.abs(expires - (Date.now() + 7200_000)) < 60_000, 'expiry is SVC_SESSION_TTL away');

  // Stored hashed, never raw.
  const db = new Database(join(server.dataDir, 'index.sqlite'), { readonly: true });
  t.teardown(() => db.close());
  const rows = db.prepare('SELECT * FROM sessions').all() as { id_hash: string }[];
  t.equal(rows.length, 1);
  t.equal(rows[0]!.id_hash, createHash('sha256').update(sid).digest('base64url'));
  t.notMatch(JSON.stringify(rows), sid);

  const who = await http('GET', `${base}/-/api/session`, { headers: { cookie: `stowage_session=${sid}` } });
  t.equal(who.status, 200);
  t.match(who.json(), { signed_in: true, user: { name: 'root' }, via: 'site_admin' });
  t.equal((await http('GET', `${base}/-/api/session`)).status, 401);
  t.equal((await http('GET', `${base}/-/api/session`, { headers: { cookie: 'stowage_session=forged' } })).status, 401);

  // Overview: session, or a forge admin's token; nothing else.
  t.equal((await http('GET', `${base}/-/api/overview`, { headers: { cookie: `stowage_session=${sid}` } })).status, 200);
  t.equal((await http('GET', `${base}/-/api/overview`, { headers: { authorization: 'Bearer root' } })).status, 200);
  t.equal((await http('GET', `${base}/-/api/overview`, { headers: { authorization: basic('opsadmin') } })).status, 200, 'admin of SVC_ADMIN_REPO');
  t.equal((await http('GET', `${base}/-/api/overview`, { headers: { authorization: basic('writer') } })).status, 403);
  t.equal((await http('GET', `${base}/-/api/overview`)).status, 401);
  // The jobs section the page polls: the same fence.
  const jobs = await http('GET', `${base}/-/jobs`, { headers: { cookie: `stowage_session=${sid}` } });
  t.equal(jobs.status, 200);
  t.match(jobs.headers['content-type'], /^text\/html/);
  t.match(jobs.body.toString(), /^<section id="jobs" data-running="0">/);
  t.equal((await http('GET', `${base}/-/jobs`, { headers: { authorization: basic('writer') } })).status, 403);
  t.equal((await http('GET', `${base}/-/jobs`)).status, 401);

  // Admin of SVC_ADMIN_REPO may sign in too.
  const ops = await http('POST', `${base}/-/api/session`, { headers: json, body: JSON.stringify({ token: 'opsadmin' }) });
  t.equal(ops.status, 201);
  t.match(ops.json(), { user: { name: 'olga' }, via: 'admin_repo' });

  // Sign out: cookie-authenticated, so the Origin must be ours.
  t.equal((await http('DELETE', `${base}/-/api/session`, { headers: { cookie: `stowage_session=${sid}` } })).status, 403, 'no Origin');
  const out = await http('DELETE', `${base}/-/api/session`, { headers: { cookie: `stowage_session=${sid}`, origin: base } });
  t.equal(out.status, 204);
  t.match(setCookie(out), /stowage_session=; Path=\/-\/; Max-Age=0/);
  t.equal((await http('GET', `${base}/-/api/session`, { headers: { cookie: `stowage_session=${sid}` } })).status, 401, 'signed out');
  t.equal((await http('GET', `${base}/-/api/overview`, { headers: { cookie: `stowage_session=${sid}` } })).status, 401);

  // The page: a sign-in form without a session, the dashboard with one.
  const form = await http('GET', `${base}/-/`);
  t.equal(form.status, 200);
  t.match(form.body.toString(), /id="signin-form"/);
  t.match(form.headers['content-security-policy'], /script-src 'sha256-/);
  const opsCookie = setCookie(ops);
  const page = await http('GET', `${base}/-/`, { headers: { cookie: opsCookie.slice(0, opsCookie.indexOf(';')) } });
  t.match(page.body.toString(), /Signed in as <strong id="user">olga<\/strong>/);
  t.match(page.body.toString(), /aria-label="Storage over time"/);
});

t.test('Secure cookie behind an https base URL', async (t) => {
  const f = await forge(t);
  const server = await startServer({ SVC_FORGE_A_API_URL: f.url, SVC_BASE_URL: 'https://lfs.example.com' });
  t.teardown(() => server.stop());
  const base = `http://127.0.0.1:${server.port}`;
  const res = await http('POST', `${base}/-/api/session`, { headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: 'root' }) });
  t.equal(res.status, 201);
  t.match(setCookie(res), /; Secure$/);
  const sid = setCookie(res).split(';')[0]!;
  // The origin that counts is SVC_BASE_URL's, not the address the request reached.
  const put = (origin: string) => http('PUT', `${base}/-/api/access`, { headers: { cookie: sid, origin, 'content-type': 'application/json' }, body: '{"repo_quota": 5}' });
  t.equal((await put(base)).status, 403);
  t.equal((await put('https://lfs.example.com')).status, 200);
});

t.test('access settings: saved, enforced at once, persisted, reset to the environment', async (t) => {
  const f = await forge(t);
  const dataDir = tmpDir();
  const env = { SVC_FORGE_A_API_URL: f.url, SVC_MAX_OBJECT_SIZE: '1MiB', SVC_LOG_REQUESTS: 'true' };
  let server = await startServer(env, { dataDir });
  t.teardown(() => server.stop());
  let base = server.url;
  const admin = { authorization: 'Bearer root', 'content-type': 'application/json' };

  const initial = await http('GET', `${base}/-/api/access`, { headers: admin });
  t.equal(initial.status, 200);
  t.same(initial.json(), { anonymous_read: true, allowed_repos: [], max_object_size: 1048576, repo_quota: 0, source: 'environment', updated_at: null, updated_by: null });

  // Validation: unknown fields and bad values are 422 naming the problem.
  const typo = await http('PUT', `${base}/-/api/access`, { headers: admin, body: '{"max_size": 5}' });
  t.equal(typo.status, 422);
  t.match(typo.json().message, /Unknown access setting "max_size"/);
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: admin, body: '{"max_object_size": "lots"}' })).status, 422);
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: admin, body: '{"allowed_repos": ["a/b/c"]}' })).status, 422);
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: { authorization: basic('writer'), 'content-type': 'application/json' }, body: '{}' })).status, 403, 'not an admin');
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: { ...admin, origin: 'https://evil.example' }, body: '{}' })).status, 403, 'foreign Origin refused even with a token');

  // Max object size: the batch refuses an over-size object in its own entry with 422; others proceed.
  const small = blob(1000);
  const saved = await http('PUT', `${base}/-/api/access`, { headers: admin, body: JSON.stringify({ max_object_size: '4KiB' }) });
  t.equal(saved.status, 200);
  t.match(saved.json(), { max_object_size: 4096, source: 'saved', updated_by: 'root' });
  const big = blob(5000);
  const b1 = await batch(base, REPO, 'writer', 'upload', [{ oid: big.oid, size: big.size }, { oid: small.oid, size: small.size }]);
  t.equal(b1.status, 200);
  const [bigEntry, smallEntry] = b1.json().objects;
  t.equal(bigEntry.error.code, 422);
  t.match(bigEntry.error.message, /at most 4096 bytes/);
  t.ok(smallEntry.actions.upload, 'the small object may upload');
  // A PUT that announces too much is refused; one whose streamed size is unknown is cut.
  // The server answers before reading the refused body and then closes the connection, so the client
  // may see the reset before the 413: both mean "refused"; the download check below proves nothing was kept.
  const put = await http('PUT', `${base}/${REPO}/objects/${big.oid}`, { headers: { authorization: basic('writer'), 'content-type': 'application/octet-stream' }, body: big.data }).catch((e: Error) => ({ status: -1, error: e }));
  t.ok(put.status === 413 || put.status === -1, `over-size upload refused (status ${put.status})`);
  if (put.status === 413) t.match((put as Awaited<ReturnType<typeof http>>).json().message, /larger than the 4096 bytes/);
  const chunked = await http('PUT', `${base}/${REPO}/objects/${big.oid}`, {
    headers: { authorization: basic('writer'), 'content-type': 'application/octet-stream' },
    body: Readable.from([big.data.subarray(0, 3000), big.data.subarray(3000)]),
  }).catch((e: Error) => ({ status: -1, error: e }));
  t.ok(chunked.status === 413 || chunked.status === -1, `chunked over-size upload cut (status ${chunked.status})`);
  // The request log line follows the answer: wait for those two lines.
  await server.waitForLogs((ev) => ev.msg === 'request' && ev.route === 'upload', 2, 'both over-size PUTs');
  const uploadsLogged = (): number[] => server.logs.filter((l) => l.includes('"msg":"request"') && l.includes('"route":"upload"')).map((l) => JSON.parse(l).status as number);
  t.same(uploadsLogged(), [413, 413], 'the server answered both over-size PUTs with 413');
  const notThere = await batch(base, REPO, 'writer', 'download', [{ oid: big.oid, size: big.size }]);
  t.equal(notThere.json().objects[0].error.code, 404, 'nothing of the cut upload was kept');
  t.equal(await push(base, REPO, 'writer', small), 200);

  // Quota: 507 per object past it; downloads keep working.
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: admin, body: JSON.stringify({ max_object_size: 0, repo_quota: 3000 }) })).status, 200);
  const q1 = blob(1500);
  const q2 = blob(1000);
  const qb = await batch(base, REPO, 'writer', 'upload', [{ oid: q1.oid, size: q1.size }, { oid: q2.oid, size: q2.size }]);
  const [e1, e2] = qb.json().objects;
  t.ok(e1.actions, '1000 held + 1500 fits in 3000');
  t.equal(e2.error?.code, 507, 'the object past the quota gets 507');
  t.equal((await http('PUT', `${base}/${REPO}/objects/${q2.oid}`, { headers: { authorization: basic('writer') }, body: q2.data })).status, 200, 'still room before q1 arrives');
  const again = await batch(base, REPO, 'writer', 'upload', [{ oid: q1.oid, size: q1.size }]);
  t.equal(again.json().objects[0].error?.code, 507, 'now q1 does not fit');
  const q1put = await http('PUT', `${base}/${REPO}/objects/${q1.oid}`, { headers: { authorization: basic('writer') }, body: q1.data });
  t.equal(q1put.status, 507, 'nor does its PUT');
  t.match(q1put.json().message, /quota/);
  t.equal((await http('PUT', `${base}/${REPO}/objects/${small.oid}`, { headers: { authorization: basic('writer') }, body: small.data })).status, 200, 'an object the repository holds costs nothing');
  const dl = await batch(base, REPO, 'writer', 'download', [{ oid: small.oid, size: small.size }]);
  t.equal((await http('GET', dl.json().objects[0].actions.download.href, { headers: { authorization: basic('writer') } })).status, 200, 'downloads never blocked');

  // Allow list: other organisations get 403 with a message, on every repository route.
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: admin, body: JSON.stringify({ repo_quota: 0, allowed_repos: 'acme/widg*, ops' }) })).status, 200);
  t.equal((await batch(base, REPO, 'writer', 'upload', [{ oid: q1.oid, size: q1.size }])).status, 200);
  const refused = await batch(base, 'other/thing', 'writer', 'upload', [{ oid: q1.oid, size: q1.size }]);
  t.equal(refused.status, 403);
  t.match(refused.json().message, /does not serve other\/thing/);
  t.equal((await batch(base, 'acme/tools', 'writer', 'download', [{ oid: q1.oid, size: q1.size }])).status, 403, 'pattern acme/widg* does not cover acme/tools');
  t.equal((await http('GET', `${base}/acme/tools/locks`, { headers: { authorization: basic('writer'), accept: LFS } })).status, 403, 'locks too');
  t.equal((await http('GET', `${base}/acme/tools`, { headers: { authorization: basic('writer') } })).status, 403, 'the page too');
  // Another spelling of acme/widgets is that repository (the forge's answer for it is cached).
  t.equal((await http('GET', `${base}/ACME/Widgets/objects/stats`, { headers: { authorization: basic('writer') } })).status, 200, 'case-insensitive match passes the allow list');

  // Anonymous read off: token-less requests are told so.
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: admin, body: JSON.stringify({ allowed_repos: [], anonymous_read: false }) })).status, 200);
  const anon = await batch(base, REPO, null, 'download', [{ oid: small.oid, size: small.size }]);
  t.equal(anon.status, 401);
  t.match(anon.json().message, /anonymous access is turned off/);
  t.equal(anon.headers['lfs-authenticate'], 'Basic realm="Stowage"');

  // Persisted: a restart keeps the saved settings.
  t.equal((await http('PUT', `${base}/-/api/access`, { headers: admin, body: JSON.stringify({ anonymous_read: true, max_object_size: '2KiB' }) })).status, 200);
  await server.stop();
  server = await startServer(env, { dataDir });
  base = server.url;
  const after = (await http('GET', `${base}/-/api/access`, { headers: admin })).json();
  t.match(after, { max_object_size: 2048, source: 'saved', anonymous_read: true });
  const b2 = await batch(base, REPO, 'writer', 'upload', [{ oid: big.oid, size: big.size }]);
  t.equal(b2.json().objects[0].error.code, 422, 'enforced after the restart');

  // Reset: the environment's defaults (SVC_MAX_OBJECT_SIZE=1MiB) apply again at once.
  const reset = await http('DELETE', `${base}/-/api/access`, { headers: admin });
  t.equal(reset.status, 200);
  t.same(reset.json(), initial.json());
  t.ok((await batch(base, REPO, 'writer', 'upload', [{ oid: big.oid, size: big.size }])).json().objects[0].actions, '5000 bytes fit under 1 MiB again');
  const huge = { oid: 'a'.repeat(64), size: 2 * 1024 * 1024 };
  t.equal((await batch(base, REPO, 'writer', 'upload', [huge])).json().objects[0].error.code, 422, 'the environment limit applies');

  // The overview counts what happened, and rejections by cause.
  const o = (await http('GET', `${base}/-/api/overview`, { headers: admin })).json();
  t.equal(o.repositories, 1);
  t.equal(o.objects, 2, 'small and q2, nothing refused or cut');
  t.equal(o.logical_bytes, 2000);
  t.equal(o.references, 2);
  t.ok(o.stored_bytes > 0);
  t.equal(o.savings.bytes, o.logical_bytes - o.stored_bytes);
  t.equal(o.transfers.last_hour.uploads, 3, 'uploads of the earlier run were sampled at shutdown');
  t.equal(o.transfers.last_hour.upload_bytes, 3000);
  t.ok(o.transfers.last_day.downloads >= 1);
  t.ok(o.rejections.last_day.object_too_large >= 2, 'over-size refusals counted');
  t.ok(o.rejections.last_day.quota_exceeded >= 2, 'quota refusals counted');
  t.ok(o.rejections.last_day.repo_not_allowed >= 3);
  t.equal(o.rejections.last_day.anonymous_read_disabled, 1);
  t.equal(o.rejections.since_start.object_too_large, 2, 'since this process started');
  t.same(o.workers, { threads: o.workers.threads, busy: 0, queued: 0, utilization: 0 });
  t.same(o.jobs, { running: [], recent: [] });
  t.ok(o.series.length >= 2, 'a sample from the first run and the live point');
  t.equal(o.series.at(-1).logical_bytes, 2000);
  t.equal(o.locks, 0);
});

import { GitHubEmulator } from '../helpers/forge-emulator.js';
import t, { type Test } from 'tap';
import { LFS, basic, http, schemaErrors, type Reply } from '../helpers/lfs-http.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

// The File Locking API over real HTTP against the real server and SQLite file, every answer checked
// against the official schemas (test/fixtures/git-lfs-schemas/http-lock-*.json).

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());

for (const r of ['org/repo', 'org/other', 'org/paging', 'org/race', 'org/stale']) forge.repos.set(r, { private: true });
forge.tokens.set('t-alice', { login: 'alice', repos: { 'org/repo': 'push', 'org/other': 'push', 'org/paging': 'push', 'org/race': 'push', 'org/stale': 'push' } });
forge.tokens.set('t-bob', { login: 'bob', repos: { 'org/repo': 'push', 'org/paging': 'push', 'org/race': 'push', 'org/stale': 'push' } });
forge.tokens.set('t-carol', { login: 'carol', repos: { 'org/repo': 'admin' } });
forge.tokens.set('t-reader', { login: 'reader', repos: { 'org/repo': 'pull' } });
forge.tokens.set('t-app', { login: 'app[bot]', kind: 'installation', repos: { 'org/repo': 'pull' } });
forge.tokens.set('t-ghost', { login: 'ghost', repos: { 'org/repo': 'push' } });
forge.tokens.set('t-adminbot', { login: 'adminbot', repos: { 'org/repo': 'admin' } });
forge.faceless.add('ghost');
forge.faceless.add('adminbot');

const server = await startServer({ SVC_FORGE_A_API_URL: forge.url });
t.teardown(() => server.stop());

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|[+-]\d{2}:\d{2})$/;

/** A lock API call as git-lfs 3.3.0 makes it (https://github.com/git-lfs/git-lfs/blob/v3.3.0/locking/api.go). */
async function api(srv: RunningServer, method: 'GET' | 'POST', path: string, token: string | null, body?: unknown): Promise<Reply> {
  const headers: Record<string, string> = { accept: LFS };
  if (token !== null) headers.authorization = basic(token);
  if (body !== undefined) headers['content-type'] = `${LFS}; charset=utf-8`;
  const res = await http(method, `${srv.url}${path}`, { headers, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
  return res;
}

/** Asserts the LFS media type and a JSON error body with a message. */
function assertError(t: Test, res: Reply, status: number, message?: RegExp): void {
  t.equal(res.status, status, `status ${status}`);
  t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/, 'LFS media type');
  const body = res.json();
  t.type(body.message, 'string', 'message present');
  t.ok(body.message.length > 0, 'message not empty');
  if (message) t.match(body.message, message);
}

function assertSchema(t: Test, res: Reply, schema: string): any {
  t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/, 'LFS media type');
  const body = res.json();
  t.equal(schemaErrors(schema, body), null, `matches ${schema}`);
  return body;
}

const create = (path: string, token: string | null, repo = 'org/repo', srv = server): Promise<Reply> => api(srv, 'POST', `/${repo}/locks`, token, { path, ref: { name: 'refs/heads/main' } });
const list = (query: string, token: string | null, repo = 'org/repo'): Promise<Reply> => api(server, 'GET', `/${repo}/locks${query}`, token);
const verify = (token: string | null, body: unknown = { ref: { name: 'refs/heads/main' } }, repo = 'org/repo'): Promise<Reply> => api(server, 'POST', `/${repo}/locks/verify`, token, body);
const unlock = (id: string, token: string | null, force = false, repo = 'org/repo', srv = server): Promise<Reply> => api(srv, 'POST', `/${repo}/locks/${id}/unlock`, token, { force, ref: { name: 'refs/heads/main' } });

t.test('create: 201 with the lock, 409 naming the holder, paths normalised', async (t) => {
  const res = await create('assets/hero.psd', 't-alice');
  t.equal(res.status, 201);
  const { lock } = assertSchema(t, res, 'http-lock-create-response-schema.json');
  t.match(lock.id, /^[A-Za-z0-9][A-Za-z0-9_-]{21}$/, 'URL-safe id, never starting like a flag');
  t.equal(lock.path, 'assets/hero.psd');
  t.match(lock.locked_at, RFC3339, 'locked_at RFC 3339');
  t.ok(Math.abs(Date.parse(lock.locked_at) - Date.now()) < 60_000, 'locked_at is now');
  t.same(lock.owner, { name: 'alice' });

  // The same file spelt differently is the same lock.
  for (const spelling of ['assets/hero.psd', './assets//hero.psd', 'assets\\hero.psd', 'assets/x/../hero.psd']) {
    const again = await create(spelling, 't-bob');
    t.equal(again.status, 409, `${spelling} conflicts`);
    const body = assertSchema(t, again, 'http-lock-create-response-schema.json');
    t.equal(body.lock.id, lock.id, 'the existing lock is in the body');
    t.match(body.message, /alice/, 'message names the holder');
    t.type(body.request_id, 'string');
  }
  const mine = await create('assets/hero.psd', 't-alice');
  t.equal(mine.status, 409, 'the holder locking again is a conflict too');
  t.match(mine.json().message, /you/);

  // Case-sensitive: another spelling in case is another file.
  const upper = await create('Assets/Hero.psd', 't-bob');
  t.equal(upper.status, 201, 'case differs → its own lock');
  t.equal(upper.json().lock.owner.name, 'bob');
});

t.test('create: bad paths and bodies are 422 with a message', async (t) => {
  for (const path of ['', '/etc/passwd', '../escape.bin', 'a/../../escape.bin', 'a\u0000b', '.', 'C:/x.bin', 42]) {
    assertError(t, await create(path as string, 't-alice'), 422);
  }
  assertError(t, await api(server, 'POST', '/org/repo/locks', 't-alice', {}), 422, /path/);
  assertError(t, await api(server, 'POST', '/org/repo/locks', 't-alice', { path: 'x', ref: 'main' }), 422);
  assertError(t, await api(server, 'POST', '/org/repo/locks', 't-alice', '{not json'), 400);
  const wrongType = await http('POST', `${server.url}/org/repo/locks`, { headers: { authorization: basic('t-alice'), accept: LFS, 'content-type': 'text/plain' }, body: '{"path":"a"}' });
  assertError(t, wrongType, 415);
  const notAcceptable = await http('POST', `${server.url}/org/repo/locks`, { headers: { authorization: basic('t-alice'), accept: 'text/html', 'content-type': LFS }, body: '{"path":"a"}' });
  assertError(t, notAcceptable, 406);
  const tooBig = await api(server, 'POST', '/org/repo/locks', 't-alice', { path: 'x'.repeat(100_000) });
  assertError(t, tooBig, 413);
});

t.test('create: who may lock', async (t) => {
  const none = await create('who.bin', null);
  assertError(t, none, 401);
  t.match(String(none.headers['lfs-authenticate']), /^Basic/, 'challenge for the credential helper');
  assertError(t, await create('who.bin', 't-nobody'), 401);
  assertError(t, await create('who.bin', 't-reader'), 403);
  assertError(t, await create('who.bin', 't-app'), 403, /.+/);
  assertError(t, await create('who.bin', 't-ghost'), 403, /forge user|app|installation/i);
  assertError(t, await create('who.bin', 't-bob', 'org/other'), 404, /not found/i);
  assertError(t, await create('who.bin', 't-alice', 'org/unknown'), 404);
  t.equal((await list('?path=who.bin', 't-alice')).json().locks.length, 0, 'no lock was taken');
});

t.test('list: filters, pull suffices, refspec accepted, empty array', async (t) => {
  const { lock } = (await create('list/one.bin', 't-alice')).json();
  const all = await list('', 't-reader');
  t.equal(all.status, 200);
  const body = assertSchema(t, all, 'http-lock-list-response-schema.json');
  t.ok(body.locks.some((l: { id: string }) => l.id === lock.id), 'reader sees the lock');
  t.notOk('next_cursor' in body, 'no next_cursor when everything fits');
  for (const l of body.locks) t.match(l.locked_at, RFC3339);

  const byPath = assertSchema(t, await list('?path=.%2Flist%2F%2Fone.bin&refspec=refs%2Fheads%2Fmain', 't-reader'), 'http-lock-list-response-schema.json');
  t.same(byPath.locks.map((l: { id: string }) => l.id), [lock.id], 'by normalised path');
  const byId = assertSchema(t, await list(`?id=${lock.id}`, 't-reader'), 'http-lock-list-response-schema.json');
  t.same(byId.locks, [lock], 'by id, same lock as created');
  t.same((await list(`?id=${lock.id}&path=elsewhere.bin`, 't-reader')).json().locks, [], 'both filters must match');
  t.same((await list('?id=nope', 't-reader')).json(), { locks: [] }, 'unknown id → empty array');
  t.same((await list('?path=List%2Fone.bin', 't-reader')).json(), { locks: [] }, 'case-sensitive path filter');

  const other = await list('', 't-alice', 'org/other');
  t.same(assertSchema(t, other, 'http-lock-list-response-schema.json'), { locks: [] }, 'another repository has none');
  t.same((await list(`?id=${lock.id}`, 't-alice', 'org/other')).json(), { locks: [] }, 'id scoped to its repository');

  for (const q of ['?limit=0', '?limit=-1', '?limit=abc', '?limit=1.5', '?cursor=zzz', '?path=%2Fabs']) assertError(t, await list(q, 't-reader'), 422);
  t.equal((await list('?limit=5000', 't-reader')).status, 200, 'a limit above the maximum is clamped');
  assertError(t, await list('', null), 401);
  assertError(t, await list('', 't-bob', 'org/other'), 404);
});

t.test('verify: ours and theirs by forge user id', async (t) => {
  const a = (await create('verify/alice.bin', 't-alice')).json().lock;
  const b = (await create('verify/bob.bin', 't-bob')).json().lock;
  const forAlice = assertSchema(t, await verify('t-alice'), 'http-lock-verify-response-schema.json');
  t.ok(forAlice.ours.some((l: { id: string }) => l.id === a.id), "alice's lock is ours for alice");
  t.ok(forAlice.theirs.some((l: { id: string }) => l.id === b.id), "bob's lock is theirs for alice");
  t.notOk(forAlice.ours.some((l: { owner: { name: string } }) => l.owner.name !== 'alice'), 'ours holds only alice');
  const forBob = assertSchema(t, await verify('t-bob'), 'http-lock-verify-response-schema.json');
  t.ok(forBob.ours.some((l: { id: string }) => l.id === b.id));
  t.ok(forBob.theirs.some((l: { id: string }) => l.id === a.id));
  // Pre-push sends neither cursor nor limit; a body without ref works too.
  t.equal((await verify('t-alice', {})).status, 200);
  t.same(assertSchema(t, await verify('t-alice', {}, 'org/other'), 'http-lock-verify-response-schema.json'), { ours: [], theirs: [] }, 'empty arrays when none');

  assertError(t, await verify('t-reader'), 403);
  // A token naming no user holds no locks: everything is theirs, so its push halts only on locked files.
  const faceless = assertSchema(t, await verify('t-ghost'), 'http-lock-verify-response-schema.json');
  t.equal(faceless.ours.length, 0, 'a faceless token owns nothing');
  t.ok(faceless.theirs.some((l: { id: string }) => l.id === a.id) && faceless.theirs.some((l: { id: string }) => l.id === b.id), 'every lock is theirs');
  assertError(t, await verify(null), 401);
  assertError(t, await verify('t-alice', { limit: 0 }), 422);
  assertError(t, await verify('t-alice', { cursor: 'bogus' }), 422);
});

t.test('unlock: owner, force by admin, refusals, 404s and repository scoping', async (t) => {
  const lock = (await create('unlock/a.bin', 't-alice')).json().lock;

  assertError(t, await unlock(lock.id, 't-bob'), 403, /alice/);
  assertError(t, await unlock(lock.id, 't-bob', true), 403, /admin/);
  assertError(t, await unlock(lock.id, 't-reader', true), 403);
  assertError(t, await unlock(lock.id, 't-alice', false, 'org/other'), 404, /lock/i);
  assertError(t, await unlock('no-such-lock', 't-alice'), 404);
  assertError(t, await unlock('bad.id', 't-alice'), 404);
  assertError(t, await unlock(lock.id, null), 401);
  t.equal((await list(`?id=${lock.id}`, 't-alice')).json().locks.length, 1, 'still held after the refusals');

  const released = await unlock(lock.id, 't-alice');
  t.equal(released.status, 200);
  t.same(assertSchema(t, released, 'http-lock-create-response-schema.json').lock, lock, 'answers the released lock');
  assertError(t, await unlock(lock.id, 't-alice'), 404, /lock/i);
  t.same((await list(`?id=${lock.id}`, 't-alice')).json().locks, [], 'gone');

  const bobs = (await create('unlock/b.bin', 't-bob')).json().lock;
  const forced = await unlock(bobs.id, 't-carol', true);
  t.equal(forced.status, 200, 'an admin may force');
  t.equal(forced.json().lock.id, bobs.id);
  t.ok(server.logs.some((l) => l.includes('lock force-released') && l.includes('"owner":"bob"') && l.includes('"released_by":"carol"')), 'force logged with both names');

  // A token naming no user owns no lock: without admin it cannot force, with admin it can.
  const d = (await create('unlock/d.bin', 't-alice')).json().lock;
  assertError(t, await unlock(d.id, 't-ghost'), 403, /alice/);
  assertError(t, await unlock(d.id, 't-ghost', true), 403, /admin/);
  t.equal((await unlock(d.id, 't-adminbot', true)).status, 200, 'an admin app token may force');

  // An empty body is read as {}, but still needs the JSON type: a cross-site form can post an empty body.
  const c = (await create('unlock/c.bin', 't-alice')).json().lock;
  const untyped = await http('POST', `${server.url}/org/repo/locks/${c.id}/unlock`, { headers: { authorization: basic('t-alice'), accept: LFS } });
  assertError(t, untyped, 415);
  const bare = await http('POST', `${server.url}/org/repo/locks/${c.id}/unlock`, { headers: { authorization: basic('t-alice'), accept: LFS, 'content-type': LFS } });
  t.equal(bare.status, 200);
  assertError(t, await api(server, 'POST', `/org/repo/locks/${c.id}/unlock`, 't-alice', { force: 'yes' }), 422);
});

t.test('paging is stable while locks are deleted between pages', async (t) => {
  const ids = new Map<string, string>();
  for (let i = 0; i < 25; i++) {
    const path = `p/${String(i).padStart(2, '0')}.bin`;
    const res = await create(path, i % 2 === 0 ? 't-alice' : 't-bob', 'org/paging');
    t.equal(res.status, 201);
    ids.set(path, res.json().lock.id);
  }
  const page1 = assertSchema(t, await list('?limit=10', 't-alice', 'org/paging'), 'http-lock-list-response-schema.json');
  t.equal(page1.locks.length, 10);
  t.type(page1.next_cursor, 'string', 'next_cursor when more exist');

  // Delete one already seen, the first two of the next page and one further on; add one.
  const deleted = ['p/05.bin', 'p/10.bin', 'p/11.bin', 'p/15.bin'];
  for (const p of deleted) {
    const owner = Number(p.slice(2, 4)) % 2 === 0 ? 't-alice' : 't-bob';
    t.equal((await unlock(ids.get(p)!, owner, false, 'org/paging')).status, 200, `unlock ${p}`);
  }
  t.equal((await create('p/25.bin', 't-alice', 'org/paging')).status, 201);

  const seen: string[] = page1.locks.map((l: { path: string }) => l.path);
  let cursor: string | undefined = page1.next_cursor;
  let pages = 1;
  while (cursor !== undefined) {
    const page = assertSchema(t, await list(`?limit=10&cursor=${encodeURIComponent(cursor)}`, 't-alice', 'org/paging'), 'http-lock-list-response-schema.json');
    seen.push(...page.locks.map((l: { path: string }) => l.path));
    cursor = page.next_cursor;
    if (++pages > 10) break;
  }
  t.equal(new Set(seen).size, seen.length, 'no lock listed twice');
  const expected = [...ids.keys(), 'p/25.bin'].filter((p) => !deleted.includes(p) || p === 'p/05.bin');
  t.same([...seen].sort(), expected.sort(), 'every surviving lock listed once, none skipped');
  t.equal(pages, 3, '10 + 10 + 3');

  // Verify pages the same way and splits each page.
  let vcursor: string | undefined;
  const ours: string[] = [];
  const theirs: string[] = [];
  do {
    const body: { cursor?: string; limit: number } = { limit: 7 };
    if (vcursor !== undefined) body.cursor = vcursor;
    const v = assertSchema(t, await verify('t-alice', body, 'org/paging'), 'http-lock-verify-response-schema.json');
    t.ok(v.ours.length + v.theirs.length <= 7);
    ours.push(...v.ours.map((l: { owner: { name: string } }) => l.owner.name));
    theirs.push(...v.theirs.map((l: { owner: { name: string } }) => l.owner.name));
    vcursor = v.next_cursor;
  } while (vcursor !== undefined);
  t.equal(ours.length + theirs.length, 22, 'verify pages cover every lock');
  t.ok(ours.every((n) => n === 'alice') && theirs.every((n) => n === 'bob'));
});

t.test('race: 50 concurrent creates for one path → exactly one 201', async (t) => {
  // Warm nothing: the first requests also race through the forge lookups.
  const results = await Promise.all(Array.from({ length: 50 }, (_, i) => create('race/level.umap', i % 2 === 0 ? 't-alice' : 't-bob', 'org/race')));
  const statuses = results.map((r) => r.status);
  t.equal(statuses.filter((s) => s === 201).length, 1, 'one winner');
  t.equal(statuses.filter((s) => s === 409).length, 49, 'everyone else conflicts');
  const winner = results.find((r) => r.status === 201)!.json().lock;
  for (const r of results.filter((x) => x.status === 409)) t.equal(r.json().lock.id, winner.id);
  t.same((await list('', 't-alice', 'org/race')).json().locks, [winner], 'one lock stored');
});

// Stale locks (SVC_LOCK_MAX_AGE) are checked in test/unit/service/cache-and-lock-ttl.test.ts, where
// the clock is moved instead of waited for.

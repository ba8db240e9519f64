import { join } from 'node:path';
import t, { type Test } from 'tap';
import { openSqliteIndex } from '../../../src/db/sqlite/sqlite-index.js';
import { LookupBudget } from '../../../src/forge/budget.js';
import { ForgeHttpClient } from '../../../src/forge/client.js';
import { GitHubAdapter } from '../../../src/forge/github.js';
import { Metrics } from '../../../src/metrics/registry.js';
import { normaliseLockPath } from '../../../src/protocol/locks.js';
import { parseRepoName } from '../../../src/protocol/repo-name.js';
import { AccessService } from '../../../src/service/access-service.js';
import { LockService } from '../../../src/service/lock-service.js';
import { GitHubEmulator } from '../../helpers/forge-emulator.js';
import { tmpDir } from '../../helpers/start-server.js';

// The TTLs of the forge-answer caches and of locks, checked by moving the services' clock instead
// of sleeping past it. The forge (an emulator on loopback) and the SQLite index are real.
const REPO = parseRepoName('acme', 'app')!;
const live = (): { signal: AbortSignal } => ({ signal: new AbortController().signal });
const PUSH = { 'acme/app': 'push' } as const;
/** What a promise rejects with (null when it resolves). */
const failure = (p: Promise<unknown>): Promise<unknown> => p.then(() => null, (e: unknown) => e);

/** A clock the test moves by hand. */
function manualClock(): { now: () => number; advance(ms: number): void } {
  let ms = Date.UTC(2030, 0, 1);
  return { now: () => ms, advance: (d) => (ms += d) };
}

async function forge(t: Test): Promise<{ gh: GitHubEmulator; http: ForgeHttpClient; budget: LookupBudget }> {
  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  const budget = new LookupBudget(10_000);
  const http = new ForgeHttpClient(5, budget);
  t.teardown(() => http.close());
  gh.repos.set('acme/app', { private: true });
  return { gh, http, budget };
}

t.test('a grant lives SVC_AUTH_CACHE_TTL and a refusal SVC_AUTH_REJECTION_TTL, by the injected clock', async (t) => {
  const { gh, http, budget } = await forge(t);
  const clock = manualClock();
  const access = new AccessService(new GitHubAdapter(gh.url, http), { cacheTtl: 300, rejectionTtl: 30, budget, cacheEntries: 16, now: clock.now }, new Metrics());
  const granted = { permissions: { admin: false, push: true, pull: true }, anonymous: false };

  gh.tokens.set('revocable', { login: 'r', repos: PUSH });
  t.same(await access.authorize('revocable', REPO, 'push', live()), granted);
  gh.tokens.delete('revocable');
  clock.advance(299_000);
  t.same(await access.authorize('revocable', REPO, 'push', live()), granted, 'revoked, but still granted from the cache within the TTL');
  t.equal(gh.lookups.length, 1, 'no second lookup within the TTL');

  clock.advance(2_000);
  t.match(await failure(access.authorize('revocable', REPO, 'push', live())), { status: 401 }, 'refused once the TTL has passed');
  gh.tokens.set('revocable', { login: 'r', repos: PUSH });
  clock.advance(29_000);
  t.match(await failure(access.authorize('revocable', REPO, 'push', live())), { status: 401 }, 'the refusal is cached for the rejection TTL');
  t.equal(gh.lookups.length, 2, 'the cached refusal cost no lookup');
  clock.advance(2_000);
  t.same(await access.authorize('revocable', REPO, 'push', live()), granted, 'and expires after it');
  t.equal(gh.lookups.length, 3);
});

t.test('SVC_LOCK_MAX_AGE: a stale lock is taken over by anyone with push, and logged', async (t) => {
  const { gh, http, budget } = await forge(t);
  const clock = manualClock();
  gh.tokens.set('t-alice', { login: 'alice', repos: PUSH });
  gh.tokens.set('t-bob', { login: 'bob', repos: PUSH });
  const access = new AccessService(new GitHubAdapter(gh.url, http), { cacheTtl: 300, rejectionTtl: 30, budget, cacheEntries: 16, now: clock.now }, new Metrics());
  const index = openSqliteIndex(join(tmpDir(), 'index.sqlite'));
  t.teardown(() => index.close());
  const logged: { msg: string; fields: Record<string, unknown> }[] = [];
  const locks = new LockService(index.locks, access, { maxAge: 60, now: clock.now }, (msg, fields) => logged.push({ msg, fields: fields as Record<string, unknown> }));
  const signal = new AbortController().signal;
  const req = (path: string) => ({ path: normaliseLockPath(path), refName: null });

  const first = await locks.create('t-alice', REPO, req('stale/a.bin'), signal);
  t.equal(first.kind, 'created');
  const b = await locks.create('t-alice', REPO, req('stale/b.bin'), signal);
  clock.advance(59_000);
  t.equal((await locks.create('t-bob', REPO, req('stale/a.bin'), signal)).kind, 'conflict', 'a fresh lock holds');
  t.match(await failure(locks.unlock('t-bob', REPO, b.lock.id, { force: true, refName: null }, signal)), { status: 403 }, 'a fresh lock is not force-released without admin');

  clock.advance(2_000);
  const taken = await locks.create('t-bob', REPO, req('stale/a.bin'), signal);
  t.equal(taken.kind, 'created', 'the stale lock is taken over');
  t.equal(taken.lock.owner!.name, 'bob');
  t.not(taken.lock.id, first.lock.id, 'a new lock id');
  const line = logged.find((l) => l.msg === 'stale lock taken over');
  t.ok(line, 'takeover logged');
  t.match(line?.fields, { previous_owner: 'alice', new_owner: 'bob', age_s: 61 });
  t.equal((await locks.unlock('t-bob', REPO, b.lock.id, { force: true, refName: null }, signal)).id, b.lock.id, 'a stale lock may be force-released without admin');
  t.notOk(JSON.stringify(logged).match(/t-alice|t-bob/), 'no token in the log');
});

import t from 'tap';
import { isLfsError } from '../../../src/errors/errors.js';
import { LookupBudget } from '../../../src/forge/budget.js';
import { ForgeHttpClient } from '../../../src/forge/client.js';
import { GitHubAdapter } from '../../../src/forge/github.js';
import { Metrics } from '../../../src/metrics/registry.js';
import { parseRepoName } from '../../../src/protocol/repo-name.js';
import { AccessService } from '../../../src/service/access-service.js';
import { GitHubEmulator } from '../../helpers/forge-emulator.js';

// The lookup budget's sliding minute, on a clock the test moves: a spent budget refuses with a
// Retry-After of its own, and lifts exactly when that many seconds have passed. (Exhaustion through
// the HTTP layer, for every forge, is test/integration/auth-budget.test.ts.) The forge is an
// emulator on loopback.

const REPO = parseRepoName('acme', 'app')!;
const live = (): { signal: AbortSignal } => ({ signal: new AbortController().signal });
/** What a promise rejects with (null when it resolves). */
const failure = (p: Promise<unknown>): Promise<unknown> => p.then(() => null, (e: unknown) => e);

t.test('a spent budget refuses until its oldest call leaves the minute, by the injected clock', async (t) => {
  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  let now = Date.UTC(2030, 0, 1);
  const clock = (): number => now;
  const budget = new LookupBudget(3, clock);
  const http = new ForgeHttpClient(5, budget);
  t.teardown(() => http.close());
  gh.repos.set('acme/app', { private: true });
  for (let i = 0; i < 5; i++) gh.tokens.set(`tok-${i}`, { login: `u${i}`, repos: { 'acme/app': 'push' } });
  const access = new AccessService(new GitHubAdapter(gh.url, http), { cacheTtl: 300, rejectionTtl: 30, budget, cacheEntries: 16, now: clock }, new Metrics());

  for (let i = 0; i < 3; i++) await access.authorize(`tok-${i}`, REPO, 'push', live());
  t.equal(budget.used(), 3, 'three lookups spent the budget');
  const asked = gh.lookups.length;

  const refused = await failure(access.authorize('tok-3', REPO, 'push', live()));
  t.ok(isLfsError(refused) && refused.code === 'LFS_ERR_LOOKUP_BUDGET_SPENT', 'the fourth is refused by our own budget');
  t.equal(isLfsError(refused) ? refused.headers['Retry-After'] : undefined, '60', 'Retry-After: when the oldest call leaves the minute');
  t.equal(gh.lookups.length, asked, 'the forge was not asked');
  t.same(await access.authorize('tok-0', REPO, 'push', live()), { permissions: { admin: false, push: true, pull: true }, anonymous: false }, 'a cached grant is never refused by the budget');

  now += 59_000;
  const later = await failure(access.authorize('tok-3', REPO, 'push', live()));
  t.equal(isLfsError(later) ? later.headers['Retry-After'] : undefined, '1', 'a second before: still refused, one second to go');

  now += 1_000;
  t.same(await access.authorize('tok-3', REPO, 'push', live()), { permissions: { admin: false, push: true, pull: true }, anonymous: false }, 'the refusal lifts once the minute has slid past');
  t.equal(budget.used(), 1, 'the minute holds only the new call');
});

import t, { type Test } from 'tap';
import { isLfsError } from '../../../src/errors/errors.js';
import { LookupBudget } from '../../../src/forge/budget.js';
import { ForgeHttpClient } from '../../../src/forge/client.js';
import { GitHubAdapter } from '../../../src/forge/github.js';
import { Metrics } from '../../../src/metrics/registry.js';
import { parseRepoName } from '../../../src/protocol/repo-name.js';
import { AccessService } from '../../../src/service/access-service.js';
import { GitHubEmulator } from '../../helpers/forge-emulator.js';
import { waitFor } from '../../helpers/wait-for.js';

const REPO = parseRepoName('acme', 'app')!;
const live = (): { signal: AbortSignal } => ({ signal: new AbortController().signal });

async function setup(t: Test, opts: Partial<{ cacheEntries: number; lookupBudget: number }> = {}): Promise<{ gh: GitHubEmulator; access: AccessService; metrics: Metrics }> {
  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  const budget = new LookupBudget(opts.lookupBudget ?? 10_000);
  const http = new ForgeHttpClient(5, budget);
  t.teardown(() => http.close());
  gh.repos.set('acme/app', { private: true });
  const metrics = new Metrics();
  const access = new AccessService(new GitHubAdapter(gh.url, http), { cacheTtl: 300, rejectionTtl: 30, budget, cacheEntries: opts.cacheEntries ?? 16 }, metrics);
  return { gh, access, metrics };
}

t.test('the cache is bounded: a spray of tokens evicts the oldest instead of growing', async (t) => {
  const { gh, access } = await setup(t, { cacheEntries: 16 });
  gh.tokens.set('keeper', { login: 'k', repos: { 'acme/app': 'push' } });
  await access.authorize('keeper', REPO, 'push', live());
  await access.authorize('keeper', REPO, 'push', live());
  t.equal(gh.lookups.length, 1, 'cached');
  for (let i = 0; i < 16; i++) await access.authorize(`spray-${i}`, REPO, 'pull', live()).catch(() => undefined);
  const before = gh.lookups.length;
  await access.authorize('keeper', REPO, 'push', live());
  t.equal(gh.lookups.length - before, 1, 'the oldest entry was evicted by 16 newer ones');
  t.notOk(gh.lookups.some((l) => l.token === null), 'tokens were never dropped to anonymous');
});

t.test('a shared lookup survives the first caller hanging up', async (t) => {
  const { gh, access } = await setup(t);
  gh.tokens.set('tok', { login: 'k', repos: { 'acme/app': 'push' } });
  gh.delayMs = 200;
  const first = new AbortController();
  const a = access.authorize('tok', REPO, 'push', first);
  const b = access.authorize('tok', REPO, 'push', live());
  first.abort(new Error('client went away'));
  await t.rejects(a, /client went away/, 'the caller that hung up gets its abort');
  t.same(await b, { permissions: { admin: false, push: true, pull: true }, anonymous: false }, 'the other waiter still gets the answer');
  t.equal(gh.lookups.length, 1, 'one lookup for both');
});

t.test('every waiter gone and the forge failing: no unhandled rejection, nothing cached', async (t) => {
  const { gh, access, metrics } = await setup(t);
  gh.tokens.set('tok', { login: 'k', repos: { 'acme/app': 'push' } });
  gh.delayMs = 100;
  gh.outage = 'reset';
  const ac = new AbortController();
  const p = access.authorize('tok', REPO, 'push', ac);
  ac.abort(new Error('gone'));
  await t.rejects(p);
  const counted = async (): Promise<boolean> => /svc_rejections_total\{cause="forge_unreachable"\} 1/.test(await metrics.registry.metrics());
  await waitFor(counted, 'the abandoned lookup to fail');
  gh.outage = null;
  gh.delayMs = 0;
  t.same(await access.authorize('tok', REPO, 'push', live()), { permissions: { admin: false, push: true, pull: true }, anonymous: false });
  const text = await metrics.registry.metrics();
  t.match(text, /svc_rejections_total\{cause="forge_unreachable"\} 1/, 'the failure was counted once');
});

t.test('anonymous grants are read only and marked anonymous', async (t) => {
  const { gh, access } = await setup(t);
  gh.repos.set('acme/site', { private: false });
  const site = parseRepoName('acme', 'site')!;
  t.same(await access.authorize(null, site, 'pull', live()), { permissions: { admin: false, push: false, pull: true }, anonymous: true });
  const err = await access.authorize(null, site, 'push', live()).catch((e: unknown) => e);
  t.ok(isLfsError(err) && err.status === 401 && err.headers['LFS-Authenticate'] !== undefined, 'anonymous push: 401 challenge');
  const priv = await access.authorize(null, REPO, 'pull', live()).catch((e: unknown) => e);
  t.ok(isLfsError(priv) && priv.code === 'LFS_ERR_AUTH_REQUIRED', 'private: 401 challenge, like a missing repository');
});

t.test('identify: once per token, shared and cached', async (t) => {
  const { gh, access } = await setup(t);
  gh.tokens.set('tok', { login: 'octo', repos: {} });
  gh.delayMs = 100;
  const [a, b] = await Promise.all([access.identify('tok', live().signal), access.identify('tok', live().signal)]);
  t.same(a, { id: String(GitHubEmulator.idOf('octo')), name: 'octo', siteAdmin: false });
  t.same(b, a);
  await access.identify('tok', live().signal);
  t.equal(gh.requests.filter((r) => r.path === '/user').length, 1, 'one /user call');
});

import { generateKeyPairSync } from 'node:crypto';
import t, { type Test } from 'tap';
import { isLfsError } from '../../../src/errors/errors.js';
import { ForgeHttpClient, retryAfterSeconds } from '../../../src/forge/client.js';
import { GitHubAppIdentity } from '../../../src/forge/github-app.js';
import { GitHubAdapter } from '../../../src/forge/github.js';
import { parseRepoName, type RepoName } from '../../../src/protocol/repo-name.js';
import { GitHubEmulator } from '../../helpers/forge-emulator.js';

const repo = (key: string): RepoName => parseRepoName(key.split('/')[0]!, key.split('/')[1]!)!;
const signal = new AbortController().signal;

async function setup(t: Test): Promise<{ gh: GitHubEmulator; http: ForgeHttpClient; adapter: GitHubAdapter }> {
  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  const http = new ForgeHttpClient(5);
  t.teardown(() => http.close());
  gh.repos.set('acme/private', { private: true });
  gh.repos.set('acme/public', { private: false });
  gh.tokens.set('t-admin', { login: 'ada', repos: { 'acme/private': 'admin' } });
  gh.tokens.set('t-maintain', { login: 'mo', repos: { 'acme/private': 'maintain' } });
  gh.tokens.set('t-push', { login: 'pat', repos: { 'acme/private': 'push' } });
  gh.tokens.set('t-triage', { login: 'tri', repos: { 'acme/private': 'triage' } });
  gh.tokens.set('t-pull', { login: 'pul', repos: { 'acme/private': 'pull' } });
  gh.tokens.set('t-none', { login: 'nob', repos: {} });
  gh.tokens.set('ghs_installation', { login: 'bot', kind: 'installation', repos: { 'acme/private': 'pull' } });
  gh.tokens.set('ghs_nokey', { login: 'bot', kind: 'installation', omitPermissions: true, repos: { 'acme/private': 'pull' } });
  return { gh, http, adapter: new GitHubAdapter(gh.url, http) };
}

t.test('forge_a permission table and installation tokens', async (t) => {
  const { adapter } = await setup(t);
  const table: [string | null, string, unknown][] = [
    ['t-admin', 'acme/private', { kind: 'granted', permissions: { admin: true, push: true, pull: true } }],
    ['t-maintain', 'acme/private', { kind: 'granted', permissions: { admin: false, push: true, pull: true } }],
    ['t-push', 'acme/private', { kind: 'granted', permissions: { admin: false, push: true, pull: true } }],
    ['t-triage', 'acme/private', { kind: 'granted', permissions: { admin: false, push: false, pull: true } }],
    ['t-pull', 'acme/private', { kind: 'granted', permissions: { admin: false, push: false, pull: true } }],
    ['t-none', 'acme/private', { kind: 'no_access' }],
    ['t-none', 'acme/public', { kind: 'granted', permissions: { admin: false, push: false, pull: true } }],
    ['t-none', 'acme/missing', { kind: 'no_access' }],
    ['bogus', 'acme/public', { kind: 'bad_token', everywhere: true }],
    ['ghs_installation', 'acme/private', { kind: 'granted', permissions: { admin: false, push: false, pull: true } }],
    ['ghs_nokey', 'acme/private', { kind: 'granted', permissions: { admin: false, push: false, pull: true } }],
    [null, 'acme/public', { kind: 'granted', permissions: { admin: false, push: false, pull: true } }],
    [null, 'acme/private', { kind: 'no_access' }],
  ];
  for (const [token, key, expected] of table) {
    t.same(await adapter.lookup(token, repo(key), signal), expected, `${token} on ${key}`);
  }
});

t.test('forge_a rate limits are never refusals', async (t) => {
  const { gh, adapter } = await setup(t);
  const now = Math.floor(Date.now() / 1000);
  const cases: [GitHubEmulator['rateLimit'], number][] = [
    [{ kind: 'primary', resetEpoch: now + 120 }, 120],
    [{ kind: 'primary', resetEpoch: now + 90, status: 429 }, 90],
    [{ kind: 'secondary', retryAfter: 42, status: 403 }, 42],
    [{ kind: 'secondary', retryAfter: 7, status: 429 }, 7],
    [{ kind: 'bare', status: 429 }, 60],
  ];
  for (const [mode, seconds] of cases) {
    gh.rateLimit = mode;
    const err = await adapter.lookup('t-push', repo('acme/private'), signal).then(() => null, (e: unknown) => e);
    t.ok(isLfsError(err) && err.code === 'LFS_ERR_FORGE_RATE_LIMITED', `${JSON.stringify(mode)} is a rate limit`);
    const ra = isLfsError(err) ? Number(err.headers['Retry-After']) : NaN;
    t.ok(Math.abs(ra - seconds) <= 1, `Retry-After ${ra} ≈ ${seconds}`);
  }
});

t.test('retryAfterSeconds: sources in order, never zero', async (t) => {
  const now = 1_700_000_000_000;
  t.equal(retryAfterSeconds({ 'retry-after': '30', 'x-ratelimit-reset': String(now / 1000 + 500) }, now), 30, 'Retry-After first');
  t.equal(retryAfterSeconds({ 'x-ratelimit-reset': String(now / 1000 + 500) }, now), 500, 'then x-ratelimit-reset (absolute)');
  t.equal(retryAfterSeconds({ 'ratelimit-reset': String(now / 1000 + 20) }, now), 20, "forge_b's RateLimit-Reset");
  t.equal(retryAfterSeconds({}, now), 60, 'else one minute');
  t.equal(retryAfterSeconds({ 'retry-after': '0' }, now), 1, 'never zero');
  t.equal(retryAfterSeconds({ 'x-ratelimit-reset': String(now / 1000 - 10) }, now), 1, 'a reset in the past is not zero');
  t.equal(retryAfterSeconds({ 'retry-after': new Date(now + 15_000).toUTCString() }, now), 15, 'HTTP date form');
});

t.test('forge_a outages are failures, not answers', async (t) => {
  const { gh, adapter } = await setup(t);
  for (const outage of ['reset', { status: 502 }, { status: 503 }, { status: 500 }] as const) {
    gh.outage = outage;
    const err = await adapter.lookup('t-push', repo('acme/private'), signal).then(() => null, (e: unknown) => e);
    t.ok(isLfsError(err) && err.code === 'LFS_ERR_FORGE_UNREACHABLE', `${JSON.stringify(outage)} → unreachable`);
  }
});

t.test('identify: users named, installation tokens not', async (t) => {
  const { gh, adapter } = await setup(t);
  gh.tokens.set('t-site', { login: 'root', siteAdmin: true, repos: {} });
  t.same(await adapter.identify('t-push', signal), { id: String(GitHubEmulator.idOf('pat')), name: 'pat', siteAdmin: false });
  t.same(await adapter.identify('t-site', signal), { id: String(GitHubEmulator.idOf('root')), name: 'root', siteAdmin: true });
  t.not(GitHubEmulator.idOf('pat'), GitHubEmulator.idOf('root'), 'each login its own id');
  t.equal(await adapter.identify('ghs_installation', signal), null);
});

t.test('app identity', async (t) => {
  const { gh, http } = await setup(t);
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  gh.app = { appId: '4242', publicKey: publicKey.export({ type: 'spki', format: 'pem' }) as string };
  gh.installations.set('acme', { id: 77 });
  gh.repos.set('other/public', { private: false });
  const app = new GitHubAppIdentity(gh.url, http, '4242', privateKey);
  const adapter = new GitHubAdapter(gh.url, http, app);

  const jwt = app.jwt();
  const claims = JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString()) as { iat: number; exp: number; iss: string };
  t.equal(JSON.parse(Buffer.from(jwt.split('.')[0]!, 'base64url').toString()).alg, 'RS256');
  t.ok(claims.exp - claims.iat <= 660 && claims.exp - Date.now() / 1000 <= 600, 'exp at most ten minutes ahead');
  t.equal(claims.iss, '4242');

  t.same(await adapter.lookup(null, repo('acme/public'), signal), { kind: 'granted', permissions: { admin: false, push: false, pull: true } }, 'public via the app');
  t.same(await adapter.lookup(null, repo('acme/private'), signal), { kind: 'no_access' }, 'the app sees the private repo, but that grants nothing');
  t.equal(gh.minted.length, 1, 'one token minted for the organization, reused');
  const asApp = gh.lookups.filter((l) => l.token === gh.minted[0]!.token);
  t.equal(asApp.length, 2, 'both lookups ran as the app');

  t.same(await adapter.lookup(null, repo('other/public'), signal), { kind: 'granted', permissions: { admin: false, push: false, pull: true } }, 'not installed → plain anonymous');
  t.equal(gh.lookups.at(-1)!.token, null, 'the fallback lookup carried no credential');

  t.same(await adapter.lookup('t-pull', repo('acme/private'), signal), { kind: 'granted', permissions: { admin: false, push: false, pull: true } });
  t.equal(gh.lookups.at(-1)!.token, 't-pull', 'an authenticated check uses the caller token');

  // The installation token revoked under us: the lookup falls back to plain, and the next one re-mints.
  gh.tokens.delete(gh.minted[0]!.token);
  t.same(await adapter.lookup(null, repo('acme/public'), signal), { kind: 'granted', permissions: { admin: false, push: false, pull: true } }, 'revoked app token: plain fallback');
  t.equal(gh.lookups.at(-1)!.token, null);
  await adapter.lookup(null, repo('acme/public'), signal);
  t.equal(gh.minted.length, 2, 'a fresh token was minted after the revoked one was forgotten');

  // A JWT signed with another key is refused by the forge; the lookup still works plainly.
  const stranger = new GitHubAppIdentity(gh.url, http, '4242', generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey);
  t.same(await new GitHubAdapter(gh.url, http, stranger).lookup(null, repo('acme/public'), signal), { kind: 'granted', permissions: { admin: false, push: false, pull: true } });
  t.equal(gh.minted.length, 2, 'no token for a forged JWT');
});

t.test('app token refreshed shortly before expiry, by the injected clock', async (t) => {
  const { gh, http } = await setup(t);
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  gh.app = { appId: '9', publicKey, tokenTtl: 3600 };
  gh.installations.set('acme', { id: 5 });
  let now = Date.now(); // the emulator dates the token by the real clock; the identity reads this one
  const adapter = new GitHubAdapter(gh.url, http, new GitHubAppIdentity(gh.url, http, '9', privateKey, { now: () => now }));
  await adapter.lookup(null, repo('acme/public'), signal);
  now += 3530_000; // 70 s before expiry, outside the 60 s refresh margin
  await adapter.lookup(null, repo('acme/public'), signal);
  t.equal(gh.minted.length, 1, 'cached while fresh');
  now += 40_000; // 30 s before expiry
  await adapter.lookup(null, repo('acme/public'), signal);
  t.equal(gh.minted.length, 2, 'minted again once within the margin');
});

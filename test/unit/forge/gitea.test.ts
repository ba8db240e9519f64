import t, { type Test } from 'tap';
import { isLfsError } from '../../../src/errors/errors.js';
import { ForgeHttpClient } from '../../../src/forge/client.js';
import { GiteaAdapter } from '../../../src/forge/gitea.js';
import { parseRepoName, type RepoName } from '../../../src/protocol/repo-name.js';
import { GiteaEmulator } from '../../helpers/gitea-emulator.js';

const repo = (key: string): RepoName => parseRepoName(key.split('/')[0]!, key.split('/')[1]!)!;
const signal = new AbortController().signal;
const ADMIN = { kind: 'granted', permissions: { admin: true, push: true, pull: true } };
const PUSH = { kind: 'granted', permissions: { admin: false, push: true, pull: true } };
const READ = { kind: 'granted', permissions: { admin: false, push: false, pull: true } };
const NONE = { kind: 'no_access' };
const BAD = { kind: 'bad_token' };
const UNKNOWN = { kind: 'bad_token', everywhere: true };

async function setup(t: Test, personality: 'gitea' | 'forgejo'): Promise<{ gt: GiteaEmulator; adapter: GiteaAdapter }> {
  const gt = new GiteaEmulator(personality);
  await gt.start();
  t.teardown(() => gt.stop());
  const http = new ForgeHttpClient(5);
  t.teardown(() => http.close());
  gt.repos.set('org/private', { private: true });
  gt.repos.set('org/public', { private: false });
  gt.repos.set('org/sibling', { private: true });
  const scopes = personality === 'forgejo' ? ['read:repository', 'read:user'] : undefined; // Forgejo requires a scope
  gt.tokens.set('admin', { login: 'ada', scopes, repos: { 'org/private': 'admin' } });
  gt.tokens.set('writer', { login: 'wri', scopes, repos: { 'org/private': 'write' } });
  gt.tokens.set('reader', { login: 'rea', scopes, repos: { 'org/private': 'read' } });
  gt.tokens.set('issues-only', { login: 'iss', scopes, repos: { 'org/private': 'none' } });
  gt.tokens.set('stranger', { login: 'str', scopes, repos: {} });
  gt.tokens.set('site-admin', { login: 'root', isAdmin: true, scopes });
  gt.tokens.set('no-scope', { login: 'ns', scopes: ['read:issue'], repos: { 'org/private': 'admin' } });
  gt.tokens.set('actions', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'org/private' });
  gt.tokens.set('actions-fork', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'org/private', forkPullRequest: true });
  return { gt, adapter: new GiteaAdapter(gt.apiUrl, http) };
}

for (const personality of ['gitea', 'forgejo'] as const) {
  t.test(`${personality}: permission table and Actions tokens`, async (t) => {
    const { gt, adapter } = await setup(t, personality);
    const table: [string | null, string, unknown][] = [
      ['admin', 'org/private', ADMIN],
      ['writer', 'org/private', PUSH],
      ['reader', 'org/private', READ],
      ['issues-only', 'org/private', NONE],
      ['stranger', 'org/private', NONE],
      ['stranger', 'org/public', READ],
      ['site-admin', 'org/private', ADMIN],
      ['no-scope', 'org/private', BAD],
      ['unknown-token', 'org/public', UNKNOWN],
      ['actions', 'org/private', PUSH],
      ['actions-fork', 'org/private', READ],
      ['actions', 'org/sibling', NONE],
      [null, 'org/public', READ],
      [null, 'org/private', NONE],
      [null, 'org/missing', NONE],
    ];
    for (const [token, key, expected] of table) {
      t.same(await adapter.lookup(token, repo(key), signal), expected, `${token} on ${key}`);
    }
    const sent = gt.requests.find((r) => r.headers.authorization !== undefined)!;
    t.match(sent.headers.authorization, /^token /, 'lowercase `token` scheme, which every version accepts');
    t.same(await adapter.identify('writer', signal), { id: '1', name: 'wri', siteAdmin: false });
    t.same(await adapter.identify('site-admin', signal), { id: '1', name: 'root', siteAdmin: true });
  });

  t.test(`${personality}: Retry-After means rate limit whatever the status; 503 without it means down`, async (t) => {
    const { gt, adapter } = await setup(t, personality);
    for (const status of [429, 503, 403, 502]) {
      gt.outage = { status, retryAfter: 17 };
      const err = await adapter.lookup('writer', repo('org/private'), signal).then(() => null, (e: unknown) => e);
      t.ok(isLfsError(err) && err.code === 'LFS_ERR_FORGE_RATE_LIMITED' && err.headers['Retry-After'] === '17', `${status} + Retry-After → rate limited, 17 s`);
    }
    for (const outage of [{ status: 503 }, { status: 502 }, 'reset'] as const) {
      gt.outage = outage;
      const err = await adapter.lookup('writer', repo('org/private'), signal).then(() => null, (e: unknown) => e);
      t.ok(isLfsError(err) && err.code === 'LFS_ERR_FORGE_UNREACHABLE', `${JSON.stringify(outage)} → down`);
    }
  });
}

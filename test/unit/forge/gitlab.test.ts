import t, { type Test } from 'tap';
import { isLfsError } from '../../../src/errors/errors.js';
import { ForgeHttpClient } from '../../../src/forge/client.js';
import { GitLabAdapter, permissionsForLevel, projectPathOfJobUrl, urlRootOf } from '../../../src/forge/gitlab.js';
import { parseRepoName, type RepoName } from '../../../src/protocol/repo-name.js';
import { GitLabEmulator } from '../../helpers/gitlab-emulator.js';

const repo = (key: string): RepoName => parseRepoName(key.split('/')[0]!, key.split('/')[1]!)!;
const signal = new AbortController().signal;
const ADMIN = { kind: 'granted', permissions: { admin: true, push: true, pull: true } };
const PUSH = { kind: 'granted', permissions: { admin: false, push: true, pull: true } };
const READ = { kind: 'granted', permissions: { admin: false, push: false, pull: true } };
const NONE = { kind: 'no_access' };
const BAD = { kind: 'bad_token' };
const UNKNOWN = { kind: 'bad_token', everywhere: true };

async function setup(t: Test): Promise<{ gl: GitLabEmulator; adapter: GitLabAdapter }> {
  const gl = new GitLabEmulator();
  await gl.start();
  t.teardown(() => gl.stop());
  const http = new ForgeHttpClient(5);
  t.teardown(() => http.close());
  gl.repos.set('grp/private', { visibility: 'private' });
  gl.repos.set('grp/public', { visibility: 'public' });
  gl.repos.set('grp/internal', { visibility: 'internal' });
  gl.repos.set('alice/own', { visibility: 'private', namespaceKind: 'user' });
  return { gl, adapter: new GitLabAdapter(gl.apiUrl, http) };
}

t.test('level table: named and unnamed levels', async (t) => {
  t.equal(permissionsForLevel(0), null);
  t.equal(permissionsForLevel(5), null, 'Minimal Access');
  t.equal(permissionsForLevel(10), null, 'Guest');
  t.equal(permissionsForLevel(15), null, 'Planner');
  t.same(permissionsForLevel(20), READ.permissions, 'Reporter');
  t.same(permissionsForLevel(25), READ.permissions, 'Security Manager sits between Reporter and Developer');
  t.same(permissionsForLevel(30), PUSH.permissions, 'Developer is the lowest that may push');
  t.same(permissionsForLevel(35), PUSH.permissions, 'an unknown level between named ones');
  t.same(permissionsForLevel(40), ADMIN.permissions, 'Maintainer');
  t.same(permissionsForLevel(50), ADMIN.permissions, 'Owner');
  t.same(permissionsForLevel(60), ADMIN.permissions, 'Admin');
});

t.test('forge_b permission table against the emulator', async (t) => {
  const { gl, adapter } = await setup(t);
  const levels: [string, number, unknown][] = [['owner', 50, ADMIN], ['maint', 40, ADMIN], ['dev', 30, PUSH], ['sec', 25, READ], ['rep', 20, READ], ['plan', 15, NONE], ['guest', 10, NONE], ['minimal', 5, NONE]];
  for (const [name, level, expected] of levels) {
    gl.tokens.set(`p-${name}`, { username: name, projects: { 'grp/private': level } });
    gl.tokens.set(`g-${name}`, { username: `${name}-g`, groups: { grp: level } });
    t.same(await adapter.lookup(`p-${name}`, repo('grp/private'), signal), expected, `project ${name} (${level})`);
    t.same(await adapter.lookup(`g-${name}`, repo('grp/private'), signal), expected, `group-inherited ${name} (${level}) counts the same`);
  }
  gl.tokens.set('mixed', { username: 'mixed', projects: { 'grp/private': 20 }, groups: { grp: 40 } });
  t.same(await adapter.lookup('mixed', repo('grp/private'), signal), ADMIN, 'the higher of project and group access');
  gl.tokens.set('mixed2', { username: 'mixed2', projects: { 'grp/private': 30 }, groups: { grp: 10 } });
  t.same(await adapter.lookup('mixed2', repo('grp/private'), signal), PUSH);

  gl.tokens.set('shared', { username: 'sh', shares: ['grp/private'] });
  t.same(await adapter.lookup('shared', repo('grp/private'), signal), READ, 'null/null on a visible private project (group share): read only');
  gl.tokens.set('admin', { username: 'root', isAdmin: true });
  t.same(await adapter.lookup('admin', repo('grp/private'), signal), READ, 'instance admin, not a member: null/null → read only');
  gl.tokens.set('stranger', { username: 'str' });
  t.same(await adapter.lookup('stranger', repo('grp/private'), signal), NONE, 'not a member: 404');
  t.same(await adapter.lookup('stranger', repo('grp/public'), signal), READ, 'a public project reads for anybody');
  t.same(await adapter.lookup('stranger', repo('grp/internal'), signal), READ, 'internal reads for any signed-in user');
  gl.tokens.set('guest-pub', { username: 'gp', projects: { 'grp/public': 10 } });
  t.same(await adapter.lookup('guest-pub', repo('grp/public'), signal), READ, 'a Guest on a public project reads what anybody reads');
  gl.tokens.set('alice', { username: 'alice', projects: { 'alice/own': 50 }, groups: { alice: 50 } });
  t.same(await adapter.lookup('alice', repo('alice/own'), signal), ADMIN, 'user namespace: group_access null');

  t.same(await adapter.lookup('nope', repo('grp/public'), signal), UNKNOWN, 'unknown token: 401 → bad token');
  gl.tokens.set('expired', { username: 'old', expired: true, projects: { 'grp/private': 50 } });
  t.same(await adapter.lookup('expired', repo('grp/private'), signal), UNKNOWN, 'expired token');
  gl.tokens.set('noscope', { username: 'ns', scopes: ['read_user'], projects: { 'grp/private': 50 } });
  t.same(await adapter.lookup('noscope', repo('grp/private'), signal), BAD, 'insufficient_scope: unusable');
  t.same(await adapter.lookup(null, repo('grp/public'), signal), READ, 'anonymous on public');
  t.same(await adapter.lookup(null, repo('grp/internal'), signal), NONE, 'anonymous on internal');
  t.same(await adapter.lookup(null, repo('grp/private'), signal), NONE, 'anonymous on private');
  t.ok(gl.lookups.every((l) => l.repo.includes('/')), 'every project lookup used the encoded path');
});

t.test('CI job tokens', async (t) => {
  const { gl, adapter } = await setup(t);
  gl.tokens.set('glcbt-64_abc', { username: 'job', kind: 'job', project: 'grp/private', jobUser: 'dev' });
  gl.tokens.set('legacyjobtoken123', { username: 'job2', kind: 'job', project: 'grp/private', jobUser: 'dev' });
  gl.tokens.set('dev', { username: 'dev', id: 12, projects: { 'grp/private': 30 } });
  gl.repos.set('grp/other', { visibility: 'private' });
  t.same(await adapter.lookup('glcbt-64_abc', repo('grp/private'), signal), PUSH, 'prefixed job token on its own project');
  t.equal(gl.jobLookups.at(-1)!.token, 'glcbt-64_abc', 'checked through GET /job with JOB-TOKEN');
  t.same(await adapter.lookup('glcbt-64_abc', repo('grp/public'), signal), READ, 'another, public project: read');
  t.same(await adapter.lookup('glcbt-64_abc', repo('grp/other'), signal), NONE, 'another, private project: nothing');
  t.same(await adapter.lookup('legacyjobtoken123', repo('grp/private'), signal), PUSH, 'unprefixed job token, found after the project endpoint 401');
  t.same(await adapter.lookup('glcbt-finished', repo('grp/private'), signal), UNKNOWN, 'a job that is not running');
  t.same(await adapter.identify('glcbt-64_abc', signal), { id: '12', name: 'dev', siteAdmin: false }, 'job tokens name the pipeline user');
  t.same(await adapter.identify('dev', signal), { id: '12', name: 'dev', siteAdmin: false });
  t.equal(projectPathOfJobUrl('https://gl.example/gitlab/grp/private/-/jobs/8', '/gitlab'), 'grp/private', 'relative URL root removed');
  t.equal(projectPathOfJobUrl('https://gl.example/gitlab/grp/private/-/jobs/8'), 'gitlab/grp/private', 'never guessed: without the root, it is part of the path');
  t.equal(projectPathOfJobUrl('https://gl.example/evilgroup/grp/private/-/jobs/8'), 'evilgroup/grp/private', 'a subgroup project keeps its whole path');
  t.equal(projectPathOfJobUrl('https://gl.example/grp/private/-/jobs/8', '/gitlab'), null, 'not under the root: nothing');
  t.equal(projectPathOfJobUrl('not a url'), null);
  t.equal(urlRootOf('https://gl.example/gitlab/api/v4/'), '/gitlab');
  t.equal(urlRootOf('https://gl.example/api/v4'), '');
});

t.test('forge_b rate limits: 429 in each form', async (t) => {
  const { gl, adapter } = await setup(t);
  gl.tokens.set('dev', { username: 'dev', projects: { 'grp/private': 30 } });
  const reset = Math.floor(Date.now() / 1000) + 300;
  const cases: [GitLabEmulator['rateLimit'], number][] = [
    [{ kind: 'rack', retryAfter: 30, resetEpoch: reset }, 30],
    [{ kind: 'rack-no-retry-after', resetEpoch: reset }, 300],
    [{ kind: 'application' }, 60],
  ];
  for (const [mode, seconds] of cases) {
    gl.rateLimit = mode;
    const err = await adapter.lookup('dev', repo('grp/private'), signal).then(() => null, (e: unknown) => e);
    t.ok(isLfsError(err) && err.code === 'LFS_ERR_FORGE_RATE_LIMITED', `${mode!.kind} is a rate limit, not a refusal`);
    t.ok(isLfsError(err) && Math.abs(Number(err.headers['Retry-After']) - seconds) <= 1, `Retry-After ≈ ${seconds}`);
  }
  gl.rateLimit = null;
  gl.outage = { status: 503 };
  const err = await adapter.lookup('dev', repo('grp/private'), signal).then(() => null, (e: unknown) => e);
  t.ok(isLfsError(err) && err.code === 'LFS_ERR_FORGE_UNREACHABLE', '503 without Retry-After: down');
});

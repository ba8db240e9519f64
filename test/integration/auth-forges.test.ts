import t from 'tap';
import { request } from 'undici';
import { ForgePersonality, GitHubEmulator, GitLabEmulator, type ForgeKind } from '../helpers/forge-emulator.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

/**
 * Access as docs/behaviour.md "Access" describes it, rule by rule, and the forge errors, against the
 * real server and the forge emulator in each of its four personalities.
 */

const OID = 'a'.repeat(64);
const LFS = 'application/vnd.git-lfs+json';

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
}

async function batch(server: RunningServer, repo: string, token: string | null, operation: 'download' | 'upload' = 'download'): Promise<Answer> {
  const headers: Record<string, string> = { 'content-type': LFS, accept: LFS };
  if (token !== null) headers.authorization = `Basic ${Buffer.from(`x:${token}`).toString('base64')}`;
  const res = await request(`${server.url}/${repo}/objects/batch`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ operation, transfers: ['basic'], objects: [{ oid: OID, size: 1 }] }),
  });
  return { status: res.statusCode, headers: res.headers, body: await res.body.text() };
}

async function rejections(server: RunningServer, cause: string): Promise<number> {
  const text = await (await request(`${server.url}/metrics`)).body.text();
  const m = new RegExp(`^svc_rejections_total\\{cause="${cause}"\\} (\\d+)`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

async function inParallel<T>(n: number, width: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++;
      out[i] = await fn(i);
    }
  }));
  return out;
}


for (const kind of ['forge_a', 'forge_b', 'forge_c', 'forge_d'] as ForgeKind[]) {
  t.test(kind, async (t) => {
    const forge = new ForgePersonality(kind);
    await forge.start();
    t.teardown(() => forge.stop());
    forge.addRepo('acme/private', false);
    forge.addRepo('acme/public', true);
    forge.addRepo('acme/open', true);
    forge.addRepo('acme/secret', false);
    const server = await startServer({ ...forge.env(), SVC_AUTH_LOOKUP_BUDGET: '100000' });
    t.teardown(() => server.stop());

    t.test('permission table through batch', async (t) => {
      const cases: [string, 'admin' | 'push' | 'pull' | 'none', number, number][] = [
        ['tok-admin', 'admin', 200, 200],
        ['tok-push', 'push', 200, 200],
        ['tok-pull', 'pull', 200, 403],
        ['tok-none', 'none', 404, 404],
      ];
      for (const [token, role, download, upload] of cases) {
        forge.grant(`${kind}-${token}`, 'acme/private', role);
        t.equal((await batch(server, 'acme/private', `${kind}-${token}`, 'download')).status, download, `${role}: download ${download}`);
        t.equal((await batch(server, 'acme/private', `${kind}-${token}`, 'upload')).status, upload, `${role}: upload ${upload}`);
      }
      const bad = await batch(server, 'acme/private', `${kind}-unknown-token`);
      t.equal(bad.status, 401, 'an unusable token is rejected with 401');
      t.match(bad.headers['lfs-authenticate'], /^Basic /, 'with a challenge so git asks for credentials again');
      const hidden = await batch(server, 'acme/secret', `${kind}-tok-push`);
      t.equal(hidden.status, 404, 'a repository the token cannot see: 404, never revealing it exists');
      t.equal((await batch(server, 'acme/nonexistent', `${kind}-tok-push`)).status, 404, 'the same answer for one that does not exist');
    });

    t.test('/health is open; object routes need a token or anonymous read', async (t) => {
      t.equal((await request(`${server.url}/health`)).statusCode, 200, '/health without a token');
      const put = await request(`${server.url}/acme/private/objects/${OID}`, { method: 'PUT', body: 'x' });
      await put.body.dump();
      t.equal(put.statusCode, 401, 'PUT without a token');
      const putPublic = await request(`${server.url}/acme/public/objects/${OID}`, { method: 'PUT', body: 'x' });
      await putPublic.body.dump();
      t.equal(putPublic.statusCode, 401, 'PUT without a token, even on a public repository');
      const get = await request(`${server.url}/acme/private/objects/${OID}`);
      await get.body.dump();
      t.equal(get.statusCode, 401, 'GET without a token on a private repository');
    });

    t.test('the token as Basic password with any username, or as Bearer', async (t) => {
      forge.grant(`${kind}-forms`, 'acme/private', 'push');
      for (const authorization of [
        `Basic ${Buffer.from(`anyone:${kind}-forms`).toString('base64')}`,
        `Basic ${Buffer.from(`gitlab-ci-token:${kind}-forms`).toString('base64')}`,
        `Bearer ${kind}-forms`,
      ]) {
        const res = await request(`${server.url}/acme/private/objects/batch`, {
          method: 'POST',
          headers: { 'content-type': LFS, accept: LFS, authorization },
          body: JSON.stringify({ operation: 'upload', objects: [{ oid: OID, size: 1 }] }),
        });
        await res.body.dump();
        t.equal(res.statusCode, 200, authorization.split(' ')[0]!);
      }
    });

    t.test('links back to this server are never marked authenticated', async (t) => {
      forge.grant(`${kind}-links`, 'acme/private', 'push');
      const up = await batch(server, 'acme/private', `${kind}-links`, 'upload');
      t.equal(up.status, 200);
      const body = JSON.parse(up.body) as { objects: { actions?: Record<string, { authenticated?: boolean; href: string }> }[] };
      const actions = Object.values(body.objects[0]!.actions ?? {});
      t.ok(actions.length > 0, 'an upload action was offered');
      for (const a of actions) t.not(a.authenticated, true, `${a.href} is not pre-authenticated`);
    });

    t.test('anonymous read of a public repository, cached per repository', async (t) => {
      const before = forge.lookupCount('acme/open');
      const answers = await inParallel(50, 5, () => batch(server, 'acme/open', null));
      t.ok(answers.every((a) => a.status === 200), 'public: anonymous download allowed');
      t.equal(forge.lookupCount('acme/open') - before, 1, '50 anonymous requests, one forge lookup');
      const up = await batch(server, 'acme/open', null, 'upload');
      t.equal(up.status, 401, 'anonymous upload: 401 challenge');
      t.match(up.headers['lfs-authenticate'], /^Basic /);
      const priv = await batch(server, 'acme/private', null);
      t.equal(priv.status, 401, 'private: anonymous gets a challenge, like a missing repository');
      t.equal((await batch(server, 'acme/nonexistent', null)).status, 401);
    });

    t.test('job, installation and inherited tokens', async (t) => {
      const e = forge.emulator;
      if (e instanceof GitHubEmulator) {
        // An installation token (Actions GITHUB_TOKEN) reads all-false flags, or none at all.
        e.tokens.set('ghs_actions_token_of_a_new_and_longer_format_0123456789', { login: 'github-actions[bot]', kind: 'installation', repos: { 'acme/private': 'pull' } });
        e.tokens.set('ghs_nokey', { login: 'bot', kind: 'installation', omitPermissions: true, repos: { 'acme/private': 'pull' } });
        for (const token of ['ghs_actions_token_of_a_new_and_longer_format_0123456789', 'ghs_nokey']) {
          t.equal((await batch(server, 'acme/private', token, 'download')).status, 200, `${token}: read`);
          t.equal((await batch(server, 'acme/private', token, 'upload')).status, 403, `${token}: never write`);
        }
      } else if (e instanceof GitLabEmulator) {
        e.tokens.set('glpat-group-dev', { username: 'gdev', groups: { acme: 30 } });
        e.tokens.set('glpat-group-rep', { username: 'grep', groups: { acme: 20 } });
        e.tokens.set('glpat-guest', { username: 'guest', projects: { 'acme/private': 10 } });
        t.equal((await batch(server, 'acme/private', 'glpat-group-dev', 'upload')).status, 200, 'an inherited Developer pushes');
        t.equal((await batch(server, 'acme/private', 'glpat-group-rep', 'upload')).status, 403, 'an inherited Reporter reads only');
        t.equal((await batch(server, 'acme/private', 'glpat-group-rep', 'download')).status, 200);
        t.equal((await batch(server, 'acme/private', 'glpat-guest', 'download')).status, 404, 'a Guest is rejected');
        e.tokens.set('glcbt-64_jobtoken', { username: 'job', kind: 'job', project: 'acme/private', jobUser: 'gdev' });
        t.equal((await batch(server, 'acme/private', 'glcbt-64_jobtoken', 'upload')).status, 200, 'a CI job token pushes to its own project');
        t.equal((await batch(server, 'acme/secret', 'glcbt-64_jobtoken', 'download')).status, 404, 'and sees no other private project');
      } else {
        e.tokens.set('actions-token', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'acme/private' });
        e.tokens.set('actions-fork', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'acme/private', forkPullRequest: true });
        t.equal((await batch(server, 'acme/private', 'actions-token', 'upload')).status, 200, 'an Actions job token pushes to its own repository');
        t.equal((await batch(server, 'acme/private', 'actions-fork', 'upload')).status, 403, 'a fork pull request token reads only');
        t.equal((await batch(server, 'acme/private', 'actions-fork', 'download')).status, 200);
        t.equal((await batch(server, 'acme/secret', 'actions-token', 'download')).status, 404, 'and sees no other repository');
      }
    });

    t.test('1,000 requests under one token cost one lookup', async (t) => {
      forge.grant(`${kind}-many`, 'acme/private', 'push');
      const before = forge.lookupCount('acme/private');
      const answers = await inParallel(1000, 16, (i) => batch(server, 'acme/private', `${kind}-many`, i % 2 === 0 ? 'upload' : 'download'));
      t.ok(answers.every((a) => a.status === 200), 'all answered 200');
      t.equal(forge.lookupCount('acme/private') - before, 1, 'one forge lookup');
    });

    t.test('a refusal storm does not cost a lookup per attempt', async (t) => {
      const before = forge.lookupCount('acme/private');
      const answers = await inParallel(200, 8, () => batch(server, 'acme/private', `${kind}-revoked-token`));
      t.ok(answers.every((a) => a.status === 401), 'all refused');
      t.equal(forge.lookupCount('acme/private') - before, 1, 'one forge lookup for 200 refusals');
      forge.grant(`${kind}-no-role`, 'acme/private', 'none');
      const before2 = forge.lookupCount('acme/private');
      await inParallel(100, 8, () => batch(server, 'acme/private', `${kind}-no-role`));
      t.equal(forge.lookupCount('acme/private') - before2, 1, 'a token without access, too');
    });

    t.test('concurrent misses share one in-flight lookup', async (t) => {
      forge.grant(`${kind}-burst`, 'acme/private', 'push');
      forge.setDelay(300);
      t.teardown(() => forge.setDelay(0));
      const before = forge.lookupCount('acme/private');
      const answers = await Promise.all(Array.from({ length: 30 }, () => batch(server, 'acme/private', `${kind}-burst`, 'upload')));
      t.ok(answers.every((a) => a.status === 200));
      t.equal(forge.lookupCount('acme/private') - before, 1, '30 simultaneous requests, one lookup');
    });

    t.test('an outage is never cached and answers 503 counted as forge_unreachable', async (t) => {
      forge.grant(`${kind}-outage`, 'acme/private', 'push');
      const counted = await rejections(server, 'forge_unreachable');
      const before = forge.emulator.requests.length;
      forge.emulator.outage = 'reset';
      const a = await batch(server, 'acme/private', `${kind}-outage`);
      const b = await batch(server, 'acme/private', `${kind}-outage`);
      t.equal(a.status, 503, 'connection reset: 503');
      t.equal(a.headers['retry-after'], undefined, 'no Retry-After: kept apart from a rate limit');
      t.equal(b.status, 503);
      forge.emulator.outage = { status: 503 };
      const c = await batch(server, 'acme/private', `${kind}-outage`);
      t.equal(c.status, 503, 'forge 503 without Retry-After: down');
      t.equal(c.headers['retry-after'], undefined);
      t.ok(forge.emulator.requests.length - before >= 3, 'each request during the outage asked the forge again');
      forge.emulator.outage = null;
      const d = await batch(server, 'acme/private', `${kind}-outage`);
      t.equal(d.status, 200, 'the next request after the outage asks again and passes');
      t.equal(await rejections(server, 'forge_unreachable') - counted, 3, 'three refusals counted as forge_unreachable');
    });

    t.test('forge rate limits: 503 + Retry-After, never a refusal', async (t) => {
      let n = 0;
      for (const signal of forge.rateLimitSignals()) {
        const token = `${kind}-rl-${n++}`;
        forge.grant(token, 'acme/private', 'push');
        const counted = await rejections(server, 'forge_rate_limited');
        signal.apply();
        const a = await batch(server, 'acme/private', token);
        forge.clearRateLimit();
        t.equal(a.status, 503, `${signal.name}: 503`);
        const ra = Number(a.headers['retry-after']);
        t.ok(ra >= 1 && Math.abs(ra - signal.expectRetryAfter) <= 2, `${signal.name}: Retry-After ${ra} ≈ ${signal.expectRetryAfter}`);
        t.equal(await rejections(server, 'forge_rate_limited') - counted, 1, `${signal.name}: counted as forge_rate_limited`);
        t.equal((await batch(server, 'acme/private', token)).status, 200, `${signal.name}: not cached as a refusal`);
      }
    });
  });

  // When the cached answers expire is checked with a moved clock in
  // test/unit/service/cache-and-lock-ttl.test.ts.
  t.test(`${kind}: grants are cached for SVC_AUTH_CACHE_TTL, refusals for the rejection TTL`, async (t) => {
    const forge = new ForgePersonality(kind);
    await forge.start();
    t.teardown(() => forge.stop());
    forge.addRepo('acme/private', false);
    const server = await startServer({ ...forge.env(), SVC_AUTH_CACHE_TTL: '300', SVC_AUTH_REJECTION_TTL: '60' });
    t.teardown(() => server.stop());

    forge.grant('revocable', 'acme/private', 'push');
    t.equal((await batch(server, 'acme/private', 'revocable')).status, 200);
    forge.revoke('revocable');
    t.equal((await batch(server, 'acme/private', 'revocable')).status, 200, 'still granted from the cache within the TTL');
    t.equal((await batch(server, 'acme/private', 'late')).status, 401, 'a token the forge does not know yet is refused');
    forge.grant('late', 'acme/private', 'push');
    t.equal((await batch(server, 'acme/private', 'late')).status, 401, 'the refusal is cached');
  });
}

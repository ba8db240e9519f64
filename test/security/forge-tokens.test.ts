import t, { type Test } from 'tap';
import { GiteaEmulator, GitHubEmulator, GitLabEmulator } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, push, type Blob } from '../helpers/lfs-http.js';
import { appKey } from '../helpers/github-app-key.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

/**
 * A forge token counts only for what the forge granted it, compared by identity: a CI job token of
 * another project (a subgroup project whose path ends with the target's, a project whose name ends
 * with it, a sibling project), an installation token of another installation, a personal token of
 * another owner never reads or writes a repository it was not granted, whatever the case or
 * encoding the repository is named in. Every token form on every forge.
 */

/** Reads one object directly (GET), as git-lfs does after a batch. */
async function read(server: RunningServer, repo: string, token: string, b: Blob): Promise<number> {
  return (await http('GET', `${server.url}/${repo}/objects/${b.oid}`, { headers: { authorization: basic(token) } })).status;
}

/** Writes one new object directly (PUT), without a batch. */
async function write(server: RunningServer, repo: string, token: string, b: Blob): Promise<number> {
  const res = await http('PUT', `${server.url}/${repo}/objects/${b.oid}`, {
    headers: { authorization: basic(token), 'content-type': 'application/octet-stream' },
    body: b.data,
  });
  return res.status;
}

/** Every way `token` could touch `repo`; each must be refused as for a repository it cannot see. */
async function refusedEverywhere(t: Test, server: RunningServer, repo: string, token: string, stored: Blob, what: string): Promise<void> {
  const fresh = blob(64);
  t.equal(await read(server, repo, token, stored), 404, `${what}: GET of a stored object refused`);
  t.equal((await batch(server.url, repo, token, 'download', [{ oid: stored.oid, size: stored.size }])).status, 404, `${what}: batch download refused`);
  t.equal((await batch(server.url, repo, token, 'upload', [{ oid: fresh.oid, size: fresh.size }])).status, 404, `${what}: batch upload refused`);
  t.equal(await write(server, repo, token, fresh), 404, `${what}: PUT of a new object refused`);
}

t.test('GitLab: a CI job token counts only for its own project', async (t) => {
  for (const root of ['', '/gitlab']) {
    await t.test(`relative URL root '${root}'`, async (t) => {
      const gl = new GitLabEmulator();
      gl.root = root;
      await gl.start();
      t.teardown(() => gl.stop());
      for (const key of ['acme/game', 'acme/other', 'evilgroup/acme/game', 'notacme/game', 'evil/game']) gl.repos.set(key, { visibility: 'private' });
      gl.repos.set('acme/public', { visibility: 'public' });
      gl.tokens.set('glpat-dev', { username: 'dev', id: 12, projects: { 'acme/game': 30, 'acme/public': 30 } });
      // Each project's job, with the glcbt- prefix and in the older unprefixed form.
      for (const project of ['acme/game', 'acme/other', 'evilgroup/acme/game', 'notacme/game', 'evil/game']) {
        const name = project.replaceAll('/', '_');
        gl.tokens.set(`glcbt-64_${name}`, { username: 'job', kind: 'job', project, jobUser: 'dev' });
        gl.tokens.set(`legacyjob${name}`, { username: 'job', kind: 'job', project, jobUser: 'dev' });
      }
      gl.tokens.set('glcbt-64_nourl', { username: 'job', kind: 'job', project: 'acme/game', jobUser: 'dev', omitWebUrl: true });

      const server = await startServer({ SVC_AUTH: 'forge_b', SVC_FORGE_B_API_URL: gl.apiUrl });
      t.teardown(() => server.stop());
      const stored = blob(100);
      t.equal(await push(server.url, 'acme/game', 'glpat-dev', stored), 200, 'a Developer stores an object');
      const pub = blob(90);
      t.equal(await push(server.url, 'acme/public', 'glpat-dev', pub), 200);

      for (const form of ['glcbt-64_', 'legacyjob']) {
        const own = `${form}acme_game`;
        t.equal(await read(server, 'acme/game', own, stored), 200, `${form}: a job reads its own project`);
        t.equal(await push(server.url, 'acme/game', own, blob(80)), 200, `${form}: and writes it`);
        for (const from of ['evilgroup/acme/game', 'notacme/game', 'acme/other', 'evil/game']) {
          const token = `${form}${from.replaceAll('/', '_')}`;
          await refusedEverywhere(t, server, 'acme/game', token, stored, `${form} job of ${from} on acme/game`);
          await refusedEverywhere(t, server, 'ACME/Game', token, stored, `${form} job of ${from} on ACME/Game`);
          t.equal(await read(server, 'acme/public', token, pub), 200, `${form} job of ${from}: a public project reads, as for anybody`);
          t.equal((await batch(server.url, 'acme/public', token, 'upload', [{ oid: 'a'.repeat(64), size: 1 }])).status, 403, `${form} job of ${from}: and never writes`);
        }
      }
      await refusedEverywhere(t, server, 'acme/game', 'glcbt-64_nourl', stored, 'a job whose answer names no project (fail closed)');

      // The repository name in another encoding is no repository of ours: refused before any lookup.
      const lookups = gl.lookups.length + gl.jobLookups.length;
      const encoded = await http('GET', `${server.url}/evilgroup%2Facme/game/objects/${stored.oid}`, { headers: { authorization: basic('glcbt-64_evilgroup_acme_game') } });
      t.not(encoded.status, 200, `an encoded subgroup path is refused (${encoded.status})`);
      t.ok(encoded.status >= 400 && encoded.status < 500, 'as bad input');
      t.equal(gl.lookups.length + gl.jobLookups.length, lookups, 'without asking the forge');
    });
  }
});

t.test('GitHub: installation and personal tokens count only where granted', async (t) => {
  const { keyFile, publicKey } = appKey(t);

  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  gh.app = { appId: '4242', publicKey };
  gh.repos.set('acme/private', { private: true });
  gh.repos.set('acme/public', { private: false });
  gh.repos.set('evil/repo', { private: true });
  // The app is installed on evil (everything) and on acme for acme/public only.
  gh.installations.set('evil', { id: 7 });
  gh.installations.set('acme', { id: 8, repos: ['acme/public'] });
  gh.tokens.set('ghp_owner', { login: 'owner', repos: { 'acme/private': 'admin', 'acme/public': 'admin' } });
  gh.tokens.set('ghp_evil', { login: 'evil', repos: { 'evil/repo': 'admin' } });
  gh.tokens.set('ghs_evil_installation', { login: 'evil-app[bot]', kind: 'installation', repos: { 'evil/repo': 'pull' } });
  gh.tokens.set('ghs_acme_selected', { login: 'acme-app[bot]', kind: 'installation', repos: { 'acme/public': 'pull' } });
  gh.tokens.set('ghs_acme_nokey', { login: 'acme-app[bot]', kind: 'installation', omitPermissions: true, repos: { 'acme/public': 'pull' } });

  const server = await startServer({ SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: gh.url, SVC_FORGE_A_APP_ID: '4242', SVC_FORGE_A_APP_KEY_FILE: keyFile });
  t.teardown(() => server.stop());
  const stored = blob(100);
  t.equal(await push(server.url, 'acme/private', 'ghp_owner', stored), 200);
  const pub = blob(90);
  t.equal(await push(server.url, 'acme/public', 'ghp_owner', pub), 200);

  for (const token of ['ghp_evil', 'ghs_evil_installation', 'ghs_acme_selected', 'ghs_acme_nokey']) {
    await refusedEverywhere(t, server, 'acme/private', token, stored, `${token} on acme/private`);
    await refusedEverywhere(t, server, 'ACME/Private', token, stored, `${token} on ACME/Private`);
    t.equal(await read(server, 'acme/public', token, pub), 200, `${token}: a public repository reads`);
  }
  for (const token of ['ghs_evil_installation', 'ghs_acme_selected', 'ghs_acme_nokey']) {
    t.equal((await batch(server.url, 'acme/public', token, 'upload', [{ oid: 'a'.repeat(64), size: 1 }])).status, 403, `${token}: an installation token never writes`);
  }
  // The app's own installation tokens only ever answer "is it public?": the one minted for evil,
  // or acme's selected-repositories one, never opens acme/private to anonymous callers.
  t.equal((await batch(server.url, 'evil/repo', null, 'download', [{ oid: stored.oid, size: stored.size }])).status, 401, 'anonymous on evil/repo (the app is installed there): private, refused');
  t.equal((await batch(server.url, 'acme/private', null, 'download', [{ oid: stored.oid, size: stored.size }])).status, 401, 'anonymous on acme/private: refused');
  t.equal(await read(server, 'acme/private', 'ghp_owner', stored), 200, 'the owner still reads');
});

t.test('Gitea and Forgejo: Actions and personal tokens count only where granted', async (t) => {
  for (const personality of ['gitea', 'forgejo'] as const) {
    await t.test(personality, async (t) => {
      const gt = new GiteaEmulator(personality);
      await gt.start();
      t.teardown(() => gt.stop());
      gt.repos.set('acme/game', { private: true });
      gt.repos.set('acme/public', { private: false });
      gt.repos.set('evil/game', { private: true });
      gt.tokens.set('owner', { login: 'owner', scopes: ['all'], repos: { 'acme/game': 'admin', 'acme/public': 'admin' } });
      gt.tokens.set('evil', { login: 'evil', scopes: ['all'], repos: { 'evil/game': 'admin' } });
      gt.tokens.set('actions-own', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'acme/game' });
      gt.tokens.set('actions-evil', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'evil/game' });
      const server = await startServer({ SVC_AUTH: personality === 'gitea' ? 'forge_c' : 'forge_d', SVC_FORGE_C_API_URL: gt.apiUrl });
      t.teardown(() => server.stop());
      const stored = blob(100);
      t.equal(await push(server.url, 'acme/game', 'owner', stored), 200);
      t.equal(await push(server.url, 'acme/game', 'actions-own', blob(70)), 200, 'an Actions token writes its own repository');
      for (const token of ['evil', 'actions-evil']) {
        await refusedEverywhere(t, server, 'acme/game', token, stored, `${token} on acme/game`);
        await refusedEverywhere(t, server, 'ACME/Game', token, stored, `${token} on ACME/Game`);
      }
    });
  }
});

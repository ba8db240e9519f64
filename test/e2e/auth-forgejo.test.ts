import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GiteaEmulator } from '../helpers/gitea-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

/**
 * The real git-lfs client against forge_d (Forgejo's personality of the Gitea API): an Actions job
 * token pushes to its own repository, a fork pull request's token may only read, and a plain
 * user token of a reader pulls.
 */

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

const fj = new GiteaEmulator('forgejo');
await fj.start();
t.teardown(() => fj.stop());
fj.repos.set('team/game', { private: true });
fj.tokens.set('actions-job-token', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'team/game' });
fj.tokens.set('fork-pr-token', { login: 'gitea-actions', kind: 'actions', actionsRepo: 'team/game', forkPullRequest: true });
fj.tokens.set('reader-token', { login: 'rea', scopes: ['read:repository'], repos: { 'team/game': 'read' } });

const server = await startServer({ SVC_AUTH: 'forge_d', SVC_FORGE_C_API_URL: fj.apiUrl });
t.teardown(() => server.stop());
const root = tmpDir('stowage-e2e-forgejo-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));

t.test('an Actions token pushes; a reader clones; a fork PR token cannot push', async (t) => {
  const ci = await GitSandbox.create(join(root, 'ci-home'), server.url, 'actions-job-token');
  const dir = join(root, 'game');
  const { remote, work } = await ci.newProject(dir, `${server.url}/team/game`);
  const bytes = randomBytes(500_000);
  writeFileSync(join(work, 'level.bin'), bytes);
  await ci.git(work, 'add', '.');
  await ci.git(work, 'commit', '-qm', 'level');
  await ci.git(work, 'push', '-q', 'origin', 'main');
  t.ok(fj.lookups.some((l) => l.token === 'actions-job-token'), 'checked with the job token');

  const reader = await GitSandbox.create(join(root, 'reader-home'), server.url, 'reader-token');
  const clone = join(dir, 'clone');
  await reader.git(dir, 'clone', '-q', remote, clone);
  t.equal(sha256(readFileSync(join(clone, 'level.bin'))), sha256(bytes), 'level.bin restored for a reader');

  ci.setToken(server.url, 'fork-pr-token');
  writeFileSync(join(work, 'patch.bin'), randomBytes(1000));
  await ci.git(work, 'add', '.');
  await ci.git(work, 'commit', '-qm', 'patch');
  await t.rejects(ci.git(work, 'push', '-q', 'origin', 'main'), 'a read-only job token cannot push objects');
});

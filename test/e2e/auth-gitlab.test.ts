import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitLabEmulator } from '../helpers/gitlab-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

/**
 * The real git-lfs client against forge_b: a CI job pushes with its job token
 * (the token as the password, as git sends it), and a client with no credentials at all pulls a public repository
 * (anonymous read).
 */

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

const gl = new GitLabEmulator();
await gl.start();
t.teardown(() => gl.stop());
gl.repos.set('grp/assets', { visibility: 'private' });
gl.repos.set('grp/site', { visibility: 'public' });
const JOB_TOKEN = `glcbt-64_${randomBytes(15).toString('hex')}`;
gl.tokens.set(JOB_TOKEN, { username: 'job', kind: 'job', project: 'grp/assets', jobUser: 'dev' });
gl.tokens.set('glpat-dev', { username: 'dev', projects: { 'grp/site': 30, 'grp/assets': 30 } });

const server = await startServer({ SVC_AUTH: 'forge_b', SVC_FORGE_B_API_URL: gl.apiUrl });
t.teardown(() => server.stop());
const root = tmpDir('stowage-e2e-auth-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));

t.test('a CI job token pushes, and the pushed objects clone back', async (t) => {
  const sb = await GitSandbox.create(join(root, 'ci-home'), server.url, JOB_TOKEN);
  const dir = join(root, 'assets');
  const { remote, work } = await sb.newProject(dir, `${server.url}/grp/assets`);
  const files: Record<string, string> = {};
  for (const [name, size] of [['model.bin', 300_000], ['texture.bin', 1_000_000]] as const) {
    const bytes = randomBytes(size);
    writeFileSync(join(work, name), bytes);
    files[name] = sha256(bytes);
  }
  await sb.git(work, 'add', '.');
  await sb.git(work, 'commit', '-qm', 'assets');
  const jobLookupsBefore = gl.jobLookups.length;
  await sb.git(work, 'push', '-q', 'origin', 'main');
  t.ok(gl.jobLookups.length > jobLookupsBefore, 'the job token was checked through GET /job');
  t.ok(gl.jobLookups.every((l) => l.token === JOB_TOKEN), 'with the job token');
  t.match((await sb.git(work, 'lfs', 'ls-files')).stdout, /texture\.bin/);

  const clone = join(dir, 'clone');
  await sb.git(dir, 'clone', '-q', remote, clone);
  for (const [name, sha] of Object.entries(files)) t.equal(sha256(readFileSync(join(clone, name))), sha, `${name} restored`);

  // Another CI job's token for a different project may not write here.
  const other = `glcbt-64_${randomBytes(15).toString('hex')}`;
  gl.tokens.set(other, { username: 'job', kind: 'job', project: 'grp/elsewhere', jobUser: 'dev' });
  sb.setToken(server.url, other);
  writeFileSync(join(work, 'more.bin'), randomBytes(1000));
  await sb.git(work, 'add', '.');
  await sb.git(work, 'commit', '-qm', 'more');
  await t.rejects(sb.git(work, 'push', '-q', 'origin', 'main'), 'a job token of another project cannot push');
});

t.test('anonymous clone of a public repository', async (t) => {
  const dev = await GitSandbox.create(join(root, 'dev-home'), server.url, 'glpat-dev');
  const dir = join(root, 'site');
  const { remote, work } = await dev.newProject(dir, `${server.url}/grp/site`);
  const bytes = randomBytes(200_000);
  writeFileSync(join(work, 'logo.bin'), bytes);
  await dev.git(work, 'add', '.');
  await dev.git(work, 'commit', '-qm', 'logo');
  await dev.git(work, 'push', '-q', 'origin', 'main');

  const anon = await GitSandbox.create(join(root, 'anon-home'), server.url, 'unused');
  writeFileSync(join(anon.home, '.git-credentials'), '', { mode: 0o600 }); // no credentials at all
  const before = gl.lookups.length;
  const clone = join(dir, 'anon-clone');
  await anon.git(dir, 'clone', '-q', remote, clone);
  t.equal(sha256(readFileSync(join(clone, 'logo.bin'))), sha256(bytes), 'logo.bin restored without credentials');
  t.equal(gl.lookups.length, before, 'the clone cost no forge lookup: answered from the cache');
  // The developer's push began without credentials too (git-lfs's default access mode is none),
  // which made the one anonymous lookup that the clone was then answered from.
  const anonymous = gl.lookups.filter((l) => l.repo === 'grp/site' && l.token === null);
  t.equal(anonymous.length, 1, 'one anonymous lookup in all: cached per repository');
});

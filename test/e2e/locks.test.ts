import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { runGit, sandboxEnv, type GitRun } from '../helpers/git.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// File locking end to end with the real git + git-lfs (3.3.0): lock, locks, locks --verify, unlock,
// unlock --force by an admin and refused for a non-admin, and a push refused by lock verification
// while someone else holds a lock on a file it changes (git-lfs https://github.com/git-lfs/git-lfs/blob/v3.3.0/commands/pre_push.go → locking/locks.go).

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('org/repo', { private: true });
forge.tokens.set('tok-alice', { login: 'alice', repos: { 'org/repo': 'push' } });
forge.tokens.set('tok-bob', { login: 'bob', repos: { 'org/repo': 'push' } });
forge.tokens.set('tok-carol', { login: 'carol', repos: { 'org/repo': 'admin' } });

const server = await startServer({ SVC_FORGE_A_API_URL: forge.url });
t.teardown(() => server.stop());
const root = tmpDir('stowage-e2e-locks-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const home = join(root, 'home');
mkdirSync(home);
const lfsUrl = `${server.url}/org/repo`;
const remote = join(root, 'remote.git');

/** Runs git in the sandbox HOME; never throws — the exit code is asserted. */
const env = sandboxEnv(home);
const git = (cwd: string, ...args: string[]): Promise<GitRun> => runGit(env, cwd, args);

/** Like `git` but fails the test run on a non-zero exit (setup steps). */
async function ok(cwd: string, ...args: string[]): Promise<GitRun> {
  const r = await git(cwd, ...args);
  if (r.code !== 0) throw new Error(`git ${args.join(' ')} exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r;
}

/** A clone for one user: their own credential store file, LFS pointed at the server, locks verified on push. */
async function cloneFor(user: string, token: string): Promise<string> {
  const work = join(root, user);
  await ok(root, 'clone', '-q', remote, work);
  const creds = join(root, `creds-${user}`);
  writeFileSync(creds, `http://${user}:${token}@127.0.0.1:${server.port}\n`, { mode: 0o600 });
  await ok(work, 'config', 'credential.helper', `store --file=${creds}`);
  await ok(work, 'config', 'lfs.url', lfsUrl);
  await ok(work, 'config', `lfs.${lfsUrl}.locksverify`, 'true');
  await ok(work, 'lfs', 'install', '--local');
  return work;
}

await ok(root, 'init', '-q', '--bare', '--initial-branch=main', remote);
const alice = await cloneFor('alice', 'tok-alice');
await ok(alice, 'checkout', '-q', '-b', 'main');
await ok(alice, 'lfs', 'track', '*.psd');
writeFileSync(join(alice, 'hero.psd'), 'hero v1\n'.repeat(1000));
writeFileSync(join(alice, 'level.psd'), 'level v1\n'.repeat(1000));
await ok(alice, 'add', '.');
await ok(alice, 'commit', '-qm', 'assets');
await ok(alice, 'push', '-q', 'origin', 'main');
const bob = await cloneFor('bob', 'tok-bob');
const carol = await cloneFor('carol', 'tok-carol');

t.test('lock, list, verify, and a push refused while someone else holds the lock', async (t) => {
  const lock = await git(alice, 'lfs', 'lock', 'hero.psd');
  t.equal(lock.code, 0, `git lfs lock: ${lock.stderr}`);
  t.match(lock.stdout, /Locked hero\.psd/);

  const again = await git(bob, 'lfs', 'lock', 'hero.psd');
  t.comment(again.stderr.trim());
  t.not(again.code, 0, 'a second lock on the path fails');
  t.match(again.stderr + again.stdout, /already locked by alice/, "the server's message names the holder");

  const locks = await git(bob, 'lfs', 'locks');
  t.equal(locks.code, 0, locks.stderr);
  t.match(locks.stdout, /hero\.psd\s+alice\s+ID:[A-Za-z0-9_-]+/, 'git lfs locks lists it with its owner');

  const mine = await git(alice, 'lfs', 'locks', '--verify');
  t.equal(mine.code, 0, mine.stderr);
  t.match(mine.stdout, /^O hero\.psd\s+alice/m, 'ours for alice');
  const theirs = await git(bob, 'lfs', 'locks', '--verify');
  t.equal(theirs.code, 0, theirs.stderr);
  t.match(theirs.stdout, /^ {2}hero\.psd\s+alice/m, 'theirs for bob');

  // Bob changes the locked file and pushes: verification halts the push.
  writeFileSync(join(bob, 'hero.psd'), 'hero v2 by bob\n'.repeat(1000));
  await ok(bob, 'commit', '-qam', 'bob edits hero');
  const refused = await git(bob, 'push', 'origin', 'main');
  t.comment(refused.stderr.trim());
  t.not(refused.code, 0, 'push refused');
  t.match(refused.stderr + refused.stdout, /locked/i, 'because of the lock');
  t.match(refused.stderr + refused.stdout, /hero\.psd/);
  const remoteHead = await ok(root, '--git-dir', remote, 'log', '-1', '--format=%s', 'main');
  t.equal(remoteHead.stdout.trim(), 'assets', 'the remote did not move');

  // Alice releases; the same push now goes through.
  const unlock = await git(alice, 'lfs', 'unlock', 'hero.psd');
  t.equal(unlock.code, 0, unlock.stderr);
  t.match(unlock.stdout, /Unlocked hero\.psd/);
  const pushed = await git(bob, 'push', 'origin', 'main');
  t.equal(pushed.code, 0, `push after release: ${pushed.stderr}`);
  t.equal((await ok(root, '--git-dir', remote, 'log', '-1', '--format=%s', 'main')).stdout.trim(), 'bob edits hero');
  t.equal((await git(bob, 'lfs', 'locks')).stdout.trim(), '', 'no locks left');
});

t.test('unlock --force: refused for a non-admin, allowed for an admin', async (t) => {
  await ok(alice, 'pull', '-q', 'origin', 'main');
  const lock = await git(alice, 'lfs', 'lock', 'level.psd');
  t.equal(lock.code, 0, lock.stderr);

  const plain = await git(bob, 'lfs', 'unlock', 'level.psd');
  t.not(plain.code, 0, "bob cannot release alice's lock");
  t.match(plain.stderr + plain.stdout, /alice|force/i);

  const forcedByBob = await git(bob, 'lfs', 'unlock', '--force', 'level.psd');
  t.comment(forcedByBob.stderr.trim());
  t.not(forcedByBob.code, 0, 'force refused without admin');
  t.match(forcedByBob.stderr + forcedByBob.stdout, /admin/i, 'the message says admin is needed');
  t.match((await git(carol, 'lfs', 'locks')).stdout, /level\.psd\s+alice/, 'still held');

  const forcedByCarol = await git(carol, 'lfs', 'unlock', '--force', 'level.psd');
  t.equal(forcedByCarol.code, 0, `admin force: ${forcedByCarol.stderr}`);
  t.match(forcedByCarol.stdout, /Unlocked level\.psd/);
  t.equal((await git(alice, 'lfs', 'locks')).stdout.trim(), '', 'released');
  t.ok(server.logs.some((l) => l.includes('lock force-released') && l.includes('"released_by":"carol"')), 'force logged');
});

t.test('unlock by id', async (t) => {
  t.equal((await git(bob, 'lfs', 'lock', 'level.psd')).code, 0);
  const listed = (await git(bob, 'lfs', 'locks', '--json')).stdout;
  const [entry] = JSON.parse(listed) as { id: string; path: string }[];
  t.equal(entry?.path, 'level.psd');
  const byId = await git(bob, 'lfs', 'unlock', `--id=${entry!.id}`);
  t.equal(byId.code, 0, byId.stderr);
  t.same(JSON.parse((await git(bob, 'lfs', 'locks', '--json')).stdout), [], 'released by id');
});

import { appendFileSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { sha256File, writeRandomFile } from '../helpers/data.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { MAIN, startServer, tmpDir } from '../helpers/start-server.js';
import { startWanProxy } from '../helpers/wan-proxy.js';

// Cache mode with the real git-lfs client: the upstream is a Stowage node on its own data directory
// and port, reached only through a byte-counting proxy; the cache's worth is asserted in bytes over
// that link. (git-lfs's lfs-test-server cannot be built offline here: docs/cache.md.)

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
for (const r of ['studio/pushed', 'studio/cold', 'studio/herd', 'studio/locked', 'studio/warm']) forge.repos.set(r, { private: true });
const all = { 'studio/pushed': 'push', 'studio/cold': 'push', 'studio/herd': 'push', 'studio/locked': 'push', 'studio/warm': 'push' } as const;
forge.tokens.set('tok-dev', { login: 'dev', repos: all });
forge.tokens.set('tok-bob', { login: 'bob', repos: all });
forge.tokens.set('tok-outsider', { login: 'olga', repos: {} });

const target = { host: '127.0.0.1', port: 0 };
const link = await startWanProxy(target);
t.teardown(() => link.close());
const upstream = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_BASE_URL: `http://127.0.0.1:${link.port}` });
t.teardown(() => upstream.stop());
target.port = upstream.port;
const cache = await startServer({ SVC_UPSTREAM_LFS_URL: `http://127.0.0.1:${link.port}/{org}/{repo}`, SVC_DISK_RESERVE: '0' });
t.teardown(() => cache.stop());

const root = tmpDir('stowage-cache-e2e-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));

/** A git user whose credential store answers for the cache and the upstream alike. */
async function user(name: string, token: string): Promise<GitSandbox> {
  const sb = await GitSandbox.create(join(root, name), cache.url, token);
  appendFileSync(join(sb.home, '.git-credentials'), `http://git:${token}@127.0.0.1:${link.port}\n`);
  return sb;
}
const dev = await user('dev', 'tok-dev');

/** Commits `count` random files of `size` bytes and pushes them with LFS at `lfsUrl`; returns name → sha256. */
async function project(dir: string, lfsUrl: string, count: number, size: number): Promise<{ remote: string; work: string; files: Map<string, string> }> {
  const { remote, work } = await dev.newProject(dir, lfsUrl);
  const files = new Map<string, string>();
  for (let i = 0; i < count; i++) files.set(`f${i}.bin`, await writeRandomFile(join(work, `f${i}.bin`), size));
  await dev.git(work, 'add', '.');
  await dev.git(work, 'commit', '-qm', 'assets');
  await dev.git(work, 'push', '-q', 'origin', 'main');
  return { remote, work, files };
}

async function checkFiles(t: Test, dir: string, files: Map<string, string>, what: string): Promise<void> {
  let same = 0;
  for (const [name, sha] of files) if ((await sha256File(join(dir, name))) === sha) same++;
  t.equal(same, files.size, `${what}: every file's sha256`);
}

t.test('a push through the cache arrives upstream', async (t) => {
  const dir = join(root, 'pushed');
  const { remote, files } = await project(dir, `${cache.url}/studio/pushed`, 5, 200_000);
  const clone = join(dir, 'direct');
  await dev.git(dir, '-c', `lfs.url=http://127.0.0.1:${link.port}/studio/pushed`, 'clone', '-q', remote, clone);
  await checkFiles(t, clone, files, 'a clone straight from the upstream');
});

t.test('the second fresh clone through the cache moves no object bytes over the link', async (t) => {
  const dir = join(root, 'cold');
  const { remote, files } = await project(dir, `http://127.0.0.1:${link.port}/studio/cold`, 20, 100_000);
  const total = 20 * 100_000;
  const clone = async (name: string): Promise<number> => {
    const before = link.bytesDown;
    await dev.git(dir, '-c', `lfs.url=${cache.url}/studio/cold`, 'clone', '-q', remote, join(dir, name));
    await checkFiles(t, join(dir, name), files, name);
    return link.bytesDown - before;
  };
  const first = await clone('first');
  t.ok(first >= total, `cold: ${first} bytes over the link for ${total} bytes of objects`);
  const second = await clone('second');
  t.ok(second < total / 50, `warm: ${second} bytes over the link (batch answers only)`);
});

t.test('clones at once of a repository the cache has never seen: each object crosses once', async (t) => {
  const dir = join(root, 'herd');
  const { remote, files } = await project(dir, `http://127.0.0.1:${link.port}/studio/herd`, 10, 300_000);
  const total = 10 * 300_000;
  const before = link.bytesDown;
  const names = ['c1', 'c2', 'c3', 'c4'];
  await Promise.all(names.map((n) => dev.git(dir, '-c', `lfs.url=${cache.url}/studio/herd`, 'clone', '-q', remote, join(dir, n))));
  for (const n of names) await checkFiles(t, join(dir, n), files, n);
  const crossed = link.bytesDown - before;
  t.ok(crossed >= total && crossed < total + total / 10, `${crossed} bytes over the link for ${names.length} clones of ${total} bytes`);
});

t.test('a credential the upstream refuses gets nothing through the cache, cached objects included', async (t) => {
  const outsider = await user('outsider', 'tok-outsider');
  const dir = join(root, 'cold');
  const clone = join(dir, 'outsider');
  await outsider.git(dir, '-c', 'lfs.fetchexclude=*', 'clone', '-q', join(dir, 'remote.git'), clone);
  await t.rejects(outsider.git(clone, '-c', `lfs.url=${cache.url}/studio/cold`, 'lfs', 'pull', '--exclude='), /./, 'the pull fails');
  t.match(readFileSync(join(clone, 'f0.bin'), 'utf8'), /^version https:\/\/git-lfs/, 'the file stays a pointer');
});

t.test('locks are relayed: a push of a file someone else locked is refused as upstream', async (t) => {
  const dir = join(root, 'locked');
  const { remote, work } = await project(dir, `${cache.url}/studio/locked`, 1, 1000);
  await dev.git(work, 'config', `lfs.${cache.url}/studio/locked.locksverify`, 'true');
  await dev.git(work, 'lfs', 'lock', 'f0.bin');
  const listed = await dev.git(work, 'lfs', 'locks');
  t.match(listed.stdout, /f0\.bin\s+dev/, 'git lfs locks through the cache shows the lock');
  const bob = await user('bob', 'tok-bob');
  const bobWork = join(dir, 'bob');
  await bob.git(dir, 'clone', '-q', remote, bobWork);
  await bob.git(bobWork, 'config', `lfs.${cache.url}/studio/locked.locksverify`, 'true');
  await writeRandomFile(join(bobWork, 'f0.bin'), 1000);
  await bob.git(bobWork, 'commit', '-qam', 'edit a locked file');
  await t.rejects(bob.git(bobWork, 'push', '-q', 'origin', 'main'), /locked|lock/i, "bob's push is refused");
  await dev.git(work, 'lfs', 'unlock', 'f0.bin');
  t.notMatch((await dev.git(work, 'lfs', 'locks')).stdout, /f0\.bin/, 'unlocked upstream');
});

t.test('stowage cache warm fetches a ref\'s objects once, so the next clone moves none', async (t) => {
  const dir = join(root, 'warm');
  const { remote, files } = await project(dir, `http://127.0.0.1:${link.port}/studio/warm`, 6, 150_000);
  const total = 6 * 150_000;
  const pointers = join(dir, 'pointers');
  await dev.git(dir, '-c', 'lfs.fetchexclude=*', 'clone', '-q', remote, pointers);
  const before = link.bytesDown;
  const cli = join(MAIN, '..', 'cli.js');
  const run = await promisify(execFile)(process.execPath, [cli, 'cache', 'warm', 'studio/warm', '--server', cache.url, '--json', '-q'], {
    cwd: pointers,
    env: { ...dev.env, STOWAGE_TOKEN: 'tok-dev' },
  });
  t.match(JSON.parse(run.stdout), { ref: 'HEAD', objects: 6, warmed: 6, refused: 0, bytes: total });
  t.ok(link.bytesDown - before >= total, 'the objects crossed the link once');
  const after = link.bytesDown;
  await dev.git(dir, '-c', `lfs.url=${cache.url}/studio/warm`, 'clone', '-q', remote, join(dir, 'clone'));
  await checkFiles(t, join(dir, 'clone'), files, 'the clone after warming');
  t.ok(link.bytesDown - after < total / 50, `${link.bytesDown - after} bytes over the link for the clone`);
});

t.test('eviction under the cap while clones run: the clones still get every byte', async (t) => {
  // A second cache whose cap holds a third of the repository: clones through it evict as they go.
  const small = await startServer({ SVC_UPSTREAM_LFS_URL: `http://127.0.0.1:${link.port}/{org}/{repo}`, SVC_DISK_RESERVE: '0', SVC_CACHE_MAX_SIZE: '1MiB' });
  t.teardown(() => small.stop());
  appendFileSync(join(dev.home, '.git-credentials'), `http://git:tok-dev@127.0.0.1:${small.port}\n`);
  const dir = join(root, 'herd');
  const files = new Map<string, string>();
  for (let i = 0; i < 10; i++) files.set(`f${i}.bin`, await sha256File(join(dir, 'c1', `f${i}.bin`)));
  const names = ['e1', 'e2'];
  await Promise.all(names.map((n) => dev.git(dir, '-c', `lfs.url=${small.url}/studio/herd`, 'clone', '-q', join(dir, 'remote.git'), join(dir, n))));
  for (const n of names) await checkFiles(t, join(dir, n), files, n);
  const metrics = (await (await fetch(`${small.url}/metrics`)).text());
  t.match(metrics, /^svc_cache_evictions_total [1-9]/m, 'objects were evicted');
  const cached = Number(/^svc_cache_bytes (\d+)/m.exec(metrics)?.[1]);
  t.ok(cached <= 1 << 20, `${cached} bytes cached, within the 1 MiB cap`);
});

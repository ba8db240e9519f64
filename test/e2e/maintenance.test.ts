import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync, readSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { basic, http } from '../helpers/lfs-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// Self-healing with the real git-lfs client and the operator CLI (issue 6): a byte planted on disk
// is found by `stowage audit --quarantine` (exit 1) and quarantined; the next `git lfs push` uploads good bytes
// again; the audit then passes and a fresh clone gets the right content. `stowage retain` runs from
// the clone (dry run first, shallow clones refused).

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('studio/heal', { private: true });
forge.tokens.set('tok-admin', { login: 'boss', repos: { 'studio/heal': 'admin' } });

const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_GC_GRACE: '2s' });
t.teardown(() => server.stop());
const root = tmpDir('stowage-e2e-maint-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const sb = await GitSandbox.create(join(root, 'home'), server.url, 'tok-admin');
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const pathOf = (oid: string): string => join(server.dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);

function cli(cwd: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [CLI, ...args], { cwd, env: { ...sb.env, STOWAGE_TOKEN: 'tok-admin', STOWAGE_URL: server.url } }, (err, stdout, stderr) => {
      res({ code: err ? ((err as { code?: number }).code ?? 99) : 0, stdout, stderr });
    });
  });
}

const dir = join(root, 'p');
const { remote, work } = await sb.newProject(dir, `${server.url}/studio/heal`);
const a = randomBytes(3 << 20);
const b = randomBytes((2 << 20) + 17);
writeFileSync(join(work, 'a.bin'), a);
writeFileSync(join(work, 'b.bin'), b);
await sb.git(work, 'add', '.');
await sb.git(work, 'commit', '-qm', 'assets');
await sb.git(work, 'push', '-q', 'origin', 'main');

t.test('a corrupt byte is found by the audit and healed by the next git lfs push', async (t) => {
  const clean = await cli(work, 'audit', 'studio/heal', '--json');
  t.equal(clean.code, 0, `a clean audit exits 0 (${clean.stderr})`);
  t.match(JSON.parse(clean.stdout), { objects: 2, ok: 2 });

  const fd = openSync(pathOf(sha(a)), 'r+');
  const one = Buffer.alloc(1);
  readSync(fd, one, 0, 1, 777);
  one[0] = one[0]! ^ 0x01;
  writeSync(fd, one, 0, 1, 777);
  closeSync(fd);

  const found = await cli(work, 'audit', 'studio/heal', '--quarantine', '--json');
  t.equal(found.code, 1, 'the CLI exits non-zero when an audit finds anything');
  const report = JSON.parse(found.stdout);
  t.match(report, { corrupt: 1, quarantined: 1, quarantine: 'applied' });
  t.equal(report.corrupt_objects[0].oid, sha(a));
  t.match(found.stderr, /^audit studio\/heal: done, 100%, .* 2\/2 objects$/m, 'plain progress lines when not on a terminal');
  const auth = { authorization: basic('tok-admin') };
  t.equal((await http('GET', `${server.url}/studio/heal/objects/${sha(a)}`, { headers: auth })).status, 404, 'quarantined: not served');

  await sb.git(work, 'lfs', 'push', '--all', 'origin');
  const back = await http('GET', `${server.url}/studio/heal/objects/${sha(a)}`, { headers: auth });
  t.ok(back.status === 200 && back.body.equals(a), 'git lfs push uploaded the quarantined object again (batch reported it missing)');
  const healed = await cli(work, 'audit', 'studio/heal', '--json');
  t.equal(healed.code, 0, 'healed');
  t.match(JSON.parse(healed.stdout), { objects: 2, ok: 2, corrupt: 0, unreadable: 0 });

  const clone = join(dir, 'clone');
  await sb.git(dir, 'clone', '-q', remote, clone);
  t.equal(sha(readFileSync(join(clone, 'a.bin'))), sha(a), 'a fresh clone gets the good bytes');
  t.equal(sha(readFileSync(join(clone, 'b.bin'))), sha(b));
});

t.test('stowage retain from the clone: dry run first, --yes applies, shallow clones refused', async (t) => {
  const stray = randomBytes(2 << 20);
  const put = await http('PUT', `${server.url}/studio/heal/objects/${sha(stray)}`, { headers: { authorization: basic('tok-admin') }, body: stray });
  t.equal(put.status, 200);
  await new Promise((r) => setTimeout(r, 2500)); // past SVC_GC_GRACE

  const dry = await cli(work, 'retain', '--json');
  t.equal(dry.code, 0, dry.stderr);
  t.match(dry.stderr, /2 objects referenced/);
  t.match(JSON.parse(dry.stdout), { swept: 1, dry_run: true });
  t.match(dry.stderr, /--yes/, 'nothing applied without --yes');
  t.equal((await http('GET', `${server.url}/studio/heal/objects/${sha(stray)}`, { headers: { authorization: basic('tok-admin') } })).status, 200);

  const real = await cli(work, 'retain', '--yes', '--json');
  t.equal(real.code, 0, real.stderr);
  t.match(JSON.parse(real.stdout), { swept: 1, bytes: stray.length, dry_run: false }, 'one JSON document: the applied run');
  t.equal((await http('GET', `${server.url}/studio/heal/objects/${sha(stray)}`, { headers: { authorization: basic('tok-admin') } })).status, 404);
  t.equal((await http('GET', `${server.url}/studio/heal/objects/${sha(b)}`, { headers: { authorization: basic('tok-admin') } })).status, 200, 'objects in history stay');

  const shallow = join(dir, 'shallow');
  await sb.git(dir, 'clone', '-q', '--depth', '1', `file://${remote}`, shallow);
  const refused = await cli(shallow, 'retain', 'studio/heal', '--yes');
  t.equal(refused.code, 2);
  t.match(refused.stderr, /shallow/);
});

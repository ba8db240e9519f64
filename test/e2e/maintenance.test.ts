import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, readSync, readdirSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { basic, http } from '../helpers/lfs-http.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// Self-healing with the real git-lfs client and the operator CLI, on the disk store and on the S3
// store (a real S3-protocol server on loopback): a byte planted in the stored bytes (a file under
// objects/, or the file behind a bucket key) is found by `stowage audit --quarantine` (exit 1) and
// quarantined (moved under quarantine/); the next `git lfs push` uploads good bytes again; the audit
// then passes and a fresh clone gets the right content. `stowage retain` runs from the clone (dry
// run first, shallow clones refused) and deletes bytes no repository references.

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
forge.repos.set('studio/heal', { private: true });
forge.tokens.set('tok-admin', { login: 'boss', repos: { 'studio/heal': 'admin' } });

for (const backend of ['disk', 's3'] as const) {
  t.test(`on the ${backend} store`, async (t) => {
    const root = tmpDir('stowage-e2e-maint-');
    t.teardown(() => rmSync(root, { recursive: true, force: true }));
    const s3 = backend === 's3' ? await startS3Server(join(root, 's3')) : null;
    if (s3 !== null) t.teardown(() => s3.stop());
    const server = await startServer({ ...(s3?.env() ?? {}), SVC_FORGE_A_API_URL: forge.url, SVC_GC_GRACE: '0s' });
    t.teardown(() => server.stop());
    const sb = await GitSandbox.create(join(root, 'home'), server.url, 'tok-admin');
    /** The file holding an object's stored bytes: under objects/ (disk), or s3rver's file for the bucket key. */
    const storedFile = (oid: string, area: 'objects' | 'quarantine' = 'objects'): string | null => {
      const base = s3 === null ? server.dataDir : join(s3.dir, s3.bucket, 'lfs');
      const dir = join(base, area);
      if (!existsSync(dir)) return null;
      // Disk: `<oid>` (quarantine/: `<oid>.<time>`); s3rver: `<oid>._S3rver_object` beside its metadata files.
      const hit = readdirSync(dir, { recursive: true })
        .map(String)
        .find((rel) => basename(rel).startsWith(oid) && !/\.(json|md5)$|_S3rver_metadata/.test(basename(rel)));
      return hit === undefined ? null : join(dir, hit);
    };

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

      const fd = openSync(storedFile(sha(a))!, 'r+');
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
      t.equal(storedFile(sha(a)), null, 'the bad bytes left the store');
      t.ok(storedFile(sha(a), 'quarantine'), 'and are kept under quarantine/ for inspection');

      await sb.git(work, 'lfs', 'push', '--all', 'origin');
      const back = await http('GET', `${server.url}/studio/heal/objects/${sha(a)}`, { headers: auth });
      t.ok(back.status === 200 && back.body.equals(a), 'git lfs push uploaded the quarantined object again (batch reported it missing)');
      t.equal(sha(readFileSync(storedFile(sha(a))!)), sha(a), 'good bytes are stored under the oid again');
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
      t.equal(storedFile(sha(stray)), null, 'its bytes are deleted from the store: no repository references them');
      t.equal((await http('GET', `${server.url}/studio/heal/objects/${sha(b)}`, { headers: { authorization: basic('tok-admin') } })).status, 200, 'objects in history stay');

      const shallow = join(dir, 'shallow');
      await sb.git(dir, 'clone', '-q', '--depth', '1', `file://${remote}`, shallow);
      const refused = await cli(shallow, 'retain', 'studio/heal', '--yes');
      t.equal(refused.code, 2);
      t.match(refused.stderr, /shallow/);
    });
  });
}

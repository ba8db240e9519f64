import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { LFS, basic, http } from '../helpers/lfs-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// Moving to Stowage with the real git-lfs client, as docs/migration.md describes: a repository's
// objects live on an old LFS server (another Stowage here, server A, standing in for any server that
// speaks the batch API); in a clone, `git lfs fetch --all` takes every object of every ref from A,
// `git config lfs.url` points the clone at the new server B, and `git lfs push --all` uploads them.
// B then holds every object, including old versions only reachable from history.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('studio/assets', { private: true });
forge.tokens.set('tok-dev', { login: 'dev', repos: { 'studio/assets': 'push' } });

const oldServer = await startServer({ SVC_FORGE_A_API_URL: forge.url });
t.teardown(() => oldServer.stop());
const newServer = await startServer({ SVC_FORGE_A_API_URL: forge.url });
t.teardown(() => newServer.stop());
const root = tmpDir('stowage-e2e-migrate-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const sb = await GitSandbox.create(join(root, 'home'), oldServer.url, 'tok-dev');
// The credential store answers for both servers (git keys credentials by host and port).
const cred = (url: string): string => `http://git:tok-dev@${new URL(url).host}\n`;
writeFileSync(join(sb.home, '.git-credentials'), cred(oldServer.url) + cred(newServer.url), { mode: 0o600 });

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
/** Where the git-lfs client keeps an object it has fetched. */
const localObject = (clone: string, oid: string): string => join(clone, '.git', 'lfs', 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);

t.test('git lfs fetch --all from the old server, git lfs push --all to Stowage: every version arrives', async (t) => {
  const dir = join(root, 'p');
  const { remote, work } = await sb.newProject(dir, `${oldServer.url}/studio/assets`);
  const v1 = randomBytes((3 << 20) + 5);
  const v2 = randomBytes(200_000);
  const other = randomBytes(12_345);
  writeFileSync(join(work, 'model.bin'), v1);
  writeFileSync(join(work, 'other.bin'), other);
  await sb.git(work, 'add', '.');
  await sb.git(work, 'commit', '-qm', 'v1');
  writeFileSync(join(work, 'model.bin'), v2); // v1 is now only in history
  await sb.git(work, 'commit', '-qam', 'v2');
  await sb.git(work, 'push', '-q', 'origin', 'main');
  const all = [v1, v2, other];

  const clone = join(dir, 'clone');
  await sb.git(dir, 'clone', '-q', remote, clone);
  t.notOk(existsSync(localObject(clone, sha(v1))), 'a plain clone has only the checked-out versions');
  await sb.git(clone, 'lfs', 'fetch', '--all', 'origin');
  for (const d of all) t.equal(sha(readFileSync(localObject(clone, sha(d)))), sha(d), `fetch --all brought ${d.length} bytes from the old server`);

  // lfs.url in .git/config wins over the committed .lfsconfig (git-lfs config precedence).
  await sb.git(clone, 'config', 'lfs.url', `${newServer.url}/studio/assets`);
  t.match((await sb.git(clone, 'lfs', 'env')).stdout, new RegExp(`Endpoint=${newServer.url}/studio/assets`), 'the clone now talks to the new server');
  const pushed = await sb.git(clone, 'lfs', 'push', '--all', 'origin');
  t.notMatch(pushed.stderr, /error/i, 'push --all without errors');

  const res = await http('POST', `${newServer.url}/studio/assets/objects/batch`, {
    headers: { authorization: basic('tok-dev'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ operation: 'download', objects: all.map((d) => ({ oid: sha(d), size: d.length })) }),
  });
  t.equal(res.status, 200);
  for (const o of res.json().objects) t.ok(o.actions?.download, `${o.oid} is on the new server`);
  for (const d of all) {
    const got = await http('GET', `${newServer.url}/studio/assets/objects/${sha(d)}`, { headers: { authorization: basic('tok-dev') } });
    t.equal(sha(got.body), sha(d), `${d.length} bytes download intact from the new server`);
  }

  // The switch committed for everyone: .lfsconfig names the new server, and a fresh clone from it works.
  await sb.git(clone, 'config', '--unset', 'lfs.url');
  writeFileSync(join(clone, '.lfsconfig'), `[lfs]\n\turl = ${newServer.url}/studio/assets\n`);
  await sb.git(clone, 'commit', '-qam', 'LFS moves to Stowage');
  await sb.git(clone, 'push', '-q', 'origin', 'main');
  await oldServer.stop(); // the old server is gone for good
  const fresh = join(dir, 'fresh');
  await sb.git(dir, 'clone', '-q', remote, fresh);
  t.equal(sha(readFileSync(join(fresh, 'model.bin'))), sha(v2));
  t.equal(sha(readFileSync(join(fresh, 'other.bin'))), sha(other));
  t.notOk(existsSync(localObject(fresh, sha(v1))));
  await sb.git(fresh, 'lfs', 'fetch', '--all', 'origin');
  t.equal(sha(readFileSync(localObject(fresh, sha(v1)))), sha(v1), 'history too comes from the new server');
});

import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, http } from '../helpers/lfs-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// Who may run which maintenance job, against the real server and a forge emulator: every job needs
// at least push, dedupe/compress/quarantine need admin, and import (which reads the server's
// SVC_IMPORT_DIR, shared by every repository) needs a server administrator, exactly the people the
// dashboard admits. Job list and show stay readable with pull.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/public', { private: false });
forge.repos.set('acme/game', { private: true });
forge.repos.set('mallory/mine', { private: true });
forge.repos.set('ops/stowage', { private: true });
const on = (role: 'admin' | 'push' | 'pull') => ({ 'acme/public': role });
forge.tokens.set('tok-pull', { login: 'viewer', repos: on('pull') });
forge.tokens.set('tok-push', { login: 'dev', repos: on('push') });
forge.tokens.set('tok-admin', { login: 'boss', repos: on('admin') });
// On GitHub every user is admin of their own repositories.
forge.tokens.set('tok-mallory', { login: 'mallory', repos: { 'mallory/mine': 'admin' } });
forge.tokens.set('tok-site', { login: 'root', siteAdmin: true, repos: {} });
forge.tokens.set('tok-ops', { login: 'ops', repos: { 'ops/stowage': 'admin' } });

const importRoot = tmpDir('stowage-sec-import-');
// Files staged for another repository's migration.
const secret = Buffer.from('acme/game secret level data\n');
const oid = createHash('sha256').update(secret).digest('hex');
const staged = join(importRoot, 'game', oid.slice(0, 2), oid.slice(2, 4), oid.slice(4));
mkdirSync(dirname(staged), { recursive: true });
writeFileSync(staged, secret);

const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_IMPORT_DIR: importRoot, SVC_ADMIN_REPO: 'ops/stowage', SVC_WORKERS: '1' });
t.teardown(() => server.stop());

const post = (repo: string, path: string, body: object, tok: string | null) =>
  http('POST', `${server.url}/${repo}/objects/${path}`, {
    headers: { ...(tok === null ? {} : { authorization: basic(tok) }), 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify(body),
  });
const get = (repo: string, path: string, tok: string | null) =>
  http('GET', `${server.url}/${repo}/objects/${path}`, { headers: { ...(tok === null ? {} : { authorization: basic(tok) }), accept: 'application/json' } });

t.test('import takes a server administrator, never a repository admin', async (t) => {
  for (const body of [{ layout: 'gitea', source: 'game' }, { layout: 'gitea', source: '' }, { layout: 'gitea', source: 'game', dry_run: true }, { layout: 'gitea', dry_run: true }]) {
    const res = await post('mallory/mine', 'import', body, 'tok-mallory');
    t.equal(res.status, 403, `an admin of their own repository is refused: ${JSON.stringify(body)}`);
    t.match(res.json(), { message: String, request_id: String });
    t.notMatch(res.body.toString(), oid.slice(4), 'no staged file name leaks');
  }
  const dl = await http('POST', `${server.url}/mallory/mine/objects/batch`, {
    headers: { authorization: basic('tok-mallory'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ operation: 'download', objects: [{ oid, size: secret.length }] }),
  });
  t.equal(dl.json().objects[0].error?.code, 404, 'nothing was imported into mallory/mine');
  t.equal((await post('mallory/mine', 'import', { layout: 'gitea', source: 'game', dry_run: true }, null)).status, 401, 'anonymous: credentials needed');
  const site = await post('acme/game', 'import', { layout: 'gitea', source: 'game', dry_run: true }, 'tok-site');
  t.equal(site.status, 200, 'a forge site admin may import');
  t.match(site.json(), { dry_run: true, files: 1, imported: 1 }, "the site admin's dry run sees the staged file");
  const ops = await post('acme/game', 'import', { layout: 'gitea', source: 'game', dry_run: true }, 'tok-ops');
  t.equal(ops.status, 200, 'an admin of SVC_ADMIN_REPO may import');
});

t.test('maintenance routes x callers on a public repository', async (t) => {
  // What the route table says: status for anonymous, pull, push, admin.
  const table: [string, object, [number, number, number, number]][] = [
    ['retain', { oids: [], dry_run: true }, [401, 403, 200, 200]],
    ['dedupe', {}, [401, 403, 403, 200]],
    ['compress', { dry_run: true }, [401, 403, 403, 200]],
    ['audit', {}, [401, 403, 200, 200]],
    ['audit', { quarantine: true }, [401, 403, 403, 200]],
    ['import', { layout: 'gitea', source: 'none', dry_run: true }, [401, 403, 403, 403]],
  ];
  const callers = [null, 'tok-pull', 'tok-push', 'tok-admin'];
  for (const [path, body, want] of table) {
    for (let i = 0; i < callers.length; i++) {
      const res = await post('acme/public', path, body, callers[i]!);
      t.equal(res.status, want[i], `${path} ${JSON.stringify(body)} as ${callers[i] ?? 'anonymous'}`);
      if (res.status >= 400) t.match(res.json(), { message: String, request_id: String }, 'the LFS error body');
    }
  }
  // A job to list, show and cancel.
  const started = await post('acme/public', 'audit', { wait: false }, 'tok-push');
  t.equal(started.status, 202);
  const id = started.json().id as string;
  for (const tok of [null, 'tok-pull']) {
    t.equal((await get('acme/public', 'jobs', tok)).status, 200, `job list as ${tok ?? 'anonymous'}`);
    t.equal((await get('acme/public', `jobs/${id}`, tok)).status, 200, `job show as ${tok ?? 'anonymous'}`);
  }
  t.equal((await post('acme/public', `jobs/${id}/cancel`, {}, null)).status, 401, 'cancel: anonymous');
  t.equal((await post('acme/public', `jobs/${id}/cancel`, {}, 'tok-pull')).status, 403, 'cancel: pull');
  t.ok([200, 202].includes((await post('acme/public', `jobs/${id}/cancel`, {}, 'tok-push')).status), 'cancel: push, as started');
});

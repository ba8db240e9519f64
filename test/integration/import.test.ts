import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import t, { type Test } from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, http } from '../helpers/lfs-http.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, waitForFile, type RunningServer } from '../helpers/start-server.js';
import { textLike } from '../helpers/data.js';

// Migration from other servers' disks against the real server: the content folders of Gitea/Forgejo,
// GitLab and lfs-test-server (all `ab/cd/<oid[4:]>`) and of a git-lfs clone (`ab/cd/<oid>`) are
// imported through POST /{org}/{repo}/objects/import from SVC_IMPORT_DIR; every file is hashed,
// misnamed and corrupt files are refused and listed, and each imported object downloads intact.
// Dedupe reports another server's layout copied into the legacy folder instead of passing over it.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
const REPOS = ['acme/from-gitea', 'acme/from-gitlab', 'acme/from-lts', 'acme/from-clone', 'acme/legacy', 'acme/dry', 'acme/to-bucket'];
for (const r of REPOS) forge.repos.set(r, { private: true });
const all = (role: 'admin' | 'push' | 'pull') => Object.fromEntries(REPOS.map((r) => [r, role]));
// Import is a server administrator's act: a forge site admin (or an admin of SVC_ADMIN_REPO).
forge.tokens.set('tok-admin', { login: 'boss', siteAdmin: true, repos: all('admin') });
forge.tokens.set('tok-push', { login: 'dev', repos: all('push') });
const as = (tok: string) => ({ authorization: basic(tok) });

const importRoot = tmpDir('stowage-import-');
const dataDir = tmpDir();
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_WORKERS: '2', SVC_IMPORT_DIR: importRoot }, { dataDir });
t.teardown(() => server.stop());
t.teardown(() => {
  if (!t.passing()) t.comment(server.logs.filter((l) => !l.includes('"msg":"request"')).join('\n'));
});

const MiB = 1 << 20;
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const storePath = (oid: string): string => join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);
const job = (repo: string, kind: string, body: object, tok = 'tok-admin', on: RunningServer = server) =>
  http('POST', `${on.url}/${repo}/objects/${kind}`, { headers: { ...as(tok), 'content-type': 'application/json' }, body: JSON.stringify(body) });
const get = (repo: string, oid: string, on: RunningServer = server) => http('GET', `${on.url}/${repo}/objects/${oid}`, { headers: as('tok-push') });
async function batchErrors(repo: string, objs: { oid: string; size: number }[], on: RunningServer = server): Promise<(number | undefined)[]> {
  const res = await http('POST', `${on.url}/${repo}/objects/batch`, {
    headers: { ...as('tok-push'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ operation: 'download', objects: objs }),
  });
  return res.json().objects.map((o: any) => o.error?.code);
}
function put(path: string, data: Buffer): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, data);
}
/** `ab/cd/<oid[4:]>` (Gitea, GitLab, lfs-test-server) or `ab/cd/<oid>` (a git-lfs clone). */
const rel = (oid: string, full: boolean): string => join(oid.slice(0, 2), oid.slice(2, 4), full ? oid : oid.slice(4));

interface Planted {
  readonly good: Buffer[];
  readonly corruptOid: string;
  readonly corruptRel: string;
  readonly misnamedRel: string;
}

/**
 * Another server's content folder with real objects, one file whose bytes do not hash to the oid its
 * path names (corrupt) and one whose name is not an object of the layout (misnamed).
 */
function plant(root: string, full: boolean, seed: number): Planted {
  const good = [randomBytes(2 * MiB + seed), textLike(MiB + 77, seed), randomBytes(1 + seed), Buffer.alloc(0)];
  for (const d of good) put(join(root, rel(sha(d), full)), d);
  const corruptOid = sha(randomBytes(32));
  const corruptRel = rel(corruptOid, full);
  put(join(root, corruptRel), randomBytes(4096));
  // The other form of name in the right folders: what choosing the wrong layout would import.
  const other = randomBytes(100 + seed);
  const misnamedRel = rel(sha(other), !full);
  put(join(root, misnamedRel), other);
  return { good, corruptOid, corruptRel, misnamedRel };
}

/** `stored(oid)`: a promise that the store holds the oid's own copy (small objects get theirs from the journal, soon). */
async function checkImported(t: Test, repo: string, p: Planted, report: any, on: RunningServer = server, stored: (oid: string) => Promise<void> = (oid) => waitForFile(storePath(oid)), absent: (oid: string) => boolean = (oid) => !existsSync(storePath(oid))): Promise<void> {
  t.match(report, { files: p.good.length + 2, imported: p.good.length, refused: 2, vanished: 0, complete: true, dry_run: false });
  t.same(
    [...report.refused_files].sort((a: any, b: any) => a.reason.localeCompare(b.reason)),
    [
      { path: p.corruptRel, reason: 'digest_mismatch', oid: p.corruptOid },
      { path: p.misnamedRel, reason: 'other_layout' },
    ],
    'the corrupt and the misnamed file are refused and listed with why',
  );
  t.same(report.refused_by_reason, { digest_mismatch: 1, other_layout: 1 });
  t.equal(report.bytes, p.good.reduce((n, d) => n + d.length, 0));
  for (const d of p.good) {
    const res = await get(repo, sha(d), on);
    t.equal(res.status, 200, `${d.length}-byte object served`);
    t.equal(sha(res.body), sha(d), `${d.length}-byte object downloads intact`);
    await stored(sha(d));
  }
  t.pass('every imported object is in the shared store');
  t.same(await batchErrors(repo, [{ oid: p.corruptOid, size: 4096 }], on), [404], 'the corrupt file is not served');
  t.ok(absent(p.corruptOid), 'and never entered the shared store');
}

t.test('Gitea/Forgejo: data/lfs/ab/cd/<oid[4:]>', async (t) => {
  const root = join(importRoot, 'gitea', 'data', 'lfs');
  const p = plant(root, false, 1);
  const before = readdirSync(root, { recursive: true }).length;
  t.equal((await job('acme/from-gitea', 'import', { layout: 'gitea', source: 'gitea/data/lfs' }, 'tok-push')).status, 403, 'import needs admin');
  const res = await job('acme/from-gitea', 'import', { layout: 'gitea', source: 'gitea/data/lfs' });
  t.equal(res.status, 200);
  const r = res.json();
  t.match(r, { layout: 'gitea', source: 'gitea/data/lfs', copied: p.good.length, already_stored: 0 });
  await checkImported(t, 'acme/from-gitea', p, r);
  t.equal(readdirSync(root, { recursive: true }).length, before, 'the source folder is only read');

  const again = (await job('acme/from-gitea', 'import', { layout: 'forgejo', source: 'gitea/data/lfs' })).json();
  t.match(again, { imported: p.good.length, copied: 0, already_stored: p.good.length, refused: 2 }, 'a second run (as forgejo) finds everything stored and still refuses the bad files');
});

t.test('GitLab: <shared dir>/lfs-objects/ab/cd/<oid[4:]>, its tmp folder reported', async (t) => {
  const source = join('gitlab', 'shared', 'lfs-objects');
  const root = join(importRoot, source);
  const p = plant(root, false, 2);
  // An object the store already holds (uploaded to another repository): only the reference is added.
  const shared = p.good[0]!;
  const up = await http('PUT', `${server.url}/acme/from-gitea/objects/${sha(shared)}`, { headers: as('tok-push'), body: shared });
  t.equal(up.status, 200);
  put(join(root, 'tmp', 'work', 'upload-123'), randomBytes(10));
  const r = (await job('acme/from-gitlab', 'import', { layout: 'gitlab', source })).json();
  // Already stored: the object uploaded above, and the empty object (the Gitea import brought it).
  t.match(r, { files: p.good.length + 3, imported: p.good.length, refused: 3, already_stored: 2, copied: p.good.length - 2 });
  t.same(r.refused_by_reason, { digest_mismatch: 1, other_layout: 1, not_an_object: 1 });
  t.ok(r.refused_files.some((f: any) => f.path === 'tmp/work/upload-123' && f.reason === 'not_an_object'), 'the upload litter is listed, not passed over');
  for (const d of p.good) t.equal(sha((await get('acme/from-gitlab', sha(d))).body), sha(d));
});

t.test('lfs-test-server: lfs-content/ab/cd/<oid[4:]>, with its .tmp litter; progress by id', async (t) => {
  const root = join(importRoot, 'lfs-content');
  const p = plant(root, false, 3);
  const litter = `${p.misnamedRel}.tmp`;
  put(join(root, litter), randomBytes(5));
  const started = await job('acme/from-lts', 'import', { layout: 'lfs-test-server', source: 'lfs-content', wait: false });
  t.equal(started.status, 202);
  const id = started.json().id;
  t.equal(started.headers.location, `/acme/from-lts/objects/jobs/${id}`);
  // The same request again joins the job under way and answers with its report when it ends.
  const joined = await job('acme/from-lts', 'import', { layout: 'lfs-test-server', source: 'lfs-content' });
  t.equal(joined.json().job, id, 'joined the running job');
  const r = joined.json();
  t.match(r, { files: p.good.length + 3, imported: p.good.length, refused: 3 });
  t.ok(r.refused_files.some((f: any) => f.path === litter && f.reason === 'not_an_object'));
  const view = (await http('GET', `${server.url}/acme/from-lts/objects/jobs/${id}`, { headers: as('tok-push') })).json();
  t.match(view, { kind: 'import', state: 'done', objects_done: p.good.length + 3, objects_total: p.good.length + 3 });
  t.equal(view.bytes_done, view.bytes_total, 'progress counted every byte');
  t.ok(view.bytes_total >= p.good.reduce((n, d) => n + d.length, 0));
  for (const d of p.good) t.equal(sha((await get('acme/from-lts', sha(d))).body), sha(d));
  t.same(await batchErrors('acme/from-lts', [{ oid: p.corruptOid, size: 4096 }]), [404]);
});

t.test("a git-lfs clone's .git/lfs/objects: ab/cd/<oid>", async (t) => {
  const root = join(importRoot, 'clone', '.git', 'lfs', 'objects');
  const p = plant(root, true, 4);
  const r = (await job('acme/from-clone', 'import', { layout: 'git-lfs', source: 'clone/.git/lfs/objects' })).json();
  await checkImported(t, 'acme/from-clone', p, r);
});

t.test('dry run: every file hashed and reported, nothing stored or referenced', async (t) => {
  const root = join(importRoot, 'dry');
  const p = plant(root, false, 5);
  const r = (await job('acme/dry', 'import', { layout: 'gitea', source: 'dry', dry_run: true })).json();
  t.match(r, { dry_run: true, imported: p.good.length, refused: 2, complete: true });
  t.same(r.refused_by_reason, { digest_mismatch: 1, other_layout: 1 });
  const big = p.good[0]!;
  t.notOk(existsSync(storePath(sha(big))), 'nothing entered the store');
  t.same(await batchErrors('acme/dry', [{ oid: sha(big), size: big.length }]), [404], 'nothing is referenced');
});

t.test('the source must be a folder inside SVC_IMPORT_DIR; the layout must be named', async (t) => {
  mkdirSync(join(importRoot, 'ok'), { recursive: true });
  const outside = tmpDir('stowage-outside-');
  symlinkSync(outside, join(importRoot, 'escape'));
  writeFileSync(join(importRoot, 'a-file'), 'x');
  const cases: [object, RegExp][] = [
    [{ source: 'ok' }, /layout must be one of gitea, forgejo, gitlab, lfs-test-server, git-lfs/],
    [{ layout: 'svn', source: 'ok' }, /layout must be one of/],
    [{ layout: 'gitea', source: '../etc' }, /no \. or \.\. segments/],
    [{ layout: 'gitea', source: 'ok/../../etc' }, /no \. or \.\. segments/],
    [{ layout: 'gitea', source: '/etc' }, /not an absolute path/],
    [{ layout: 'gitea', source: 'escape' }, /outside SVC_IMPORT_DIR/],
    [{ layout: 'gitea', source: 'missing' }, /No folder "missing" in SVC_IMPORT_DIR/],
    [{ layout: 'gitea', source: 'a-file' }, /is not a folder/],
    [{ layout: 'gitea', source: 42 }, /source must be a folder name/],
  ];
  for (const [body, message] of cases) {
    const res = await job('acme/dry', 'import', body);
    t.equal(res.status, 422, JSON.stringify(body));
    t.equal(res.headers['content-type'], LFS);
    t.match(res.json(), { message, request_id: String });
  }
  const nothing = (await job('acme/dry', 'import', { layout: 'gitea', source: 'ok' })).json();
  t.match(nothing, { files: 0, imported: 0, refused: 0, complete: true }, 'an empty folder imports nothing');
  t.notOk(existsSync(join(outside, 'x')));
});

t.test('without SVC_IMPORT_DIR imports are off', async (t) => {
  const other = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_WORKERS: '1' });
  t.teardown(() => other.stop());
  const res = await http('POST', `${other.url}/acme/dry/objects/import`, {
    headers: { ...as('tok-admin'), 'content-type': 'application/json' },
    body: JSON.stringify({ layout: 'gitea', source: '' }),
  });
  t.equal(res.status, 404);
  t.match(res.json(), { message: /Imports are off on this server: set SVC_IMPORT_DIR/ });
});

t.test('dedupe meets a Gitea layout copied into the legacy folder: refused and listed, not passed over', async (t) => {
  const legacy = join(dataDir, 'repos', 'acme', 'legacy');
  const ours = randomBytes(3000);
  put(join(legacy, rel(sha(ours), true)), ours);
  const gitea = randomBytes(5000);
  put(join(legacy, rel(sha(gitea), false)), gitea);
  put(join(legacy, 'README'), Buffer.from('notes'));
  const r = (await job('acme/legacy', 'dedupe', {})).json();
  t.match(r, { objects: 1, folded: 1, refused: 2, complete: true, set_aside: 0 });
  const byPath = (a: { path: string }, b: { path: string }): number => (a.path < b.path ? -1 : 1);
  t.same(
    [...r.refused_files].sort(byPath),
    [
      { path: 'README', reason: 'not_an_object' },
      { path: rel(sha(gitea), false), reason: 'other_layout' },
    ].sort(byPath),
  );
  t.ok(existsSync(join(legacy, rel(sha(gitea), false))), 'the refused file is left where it was');
  t.equal(sha((await get('acme/legacy', sha(ours))).body), sha(ours));
  const again = (await job('acme/legacy', 'dedupe', {})).json();
  t.match(again, { objects: 0, refused: 2 }, 'and reported again until the operator deals with it');
  t.equal(readFileSync(join(legacy, 'README'), 'utf8'), 'notes');
});

t.test('import into the S3 store: written through the store as an upload is, so a bucket gets it too', async (t) => {
  const s3 = await startS3Server(tmpDir('stowage-import-s3-'));
  t.teardown(() => s3.stop());
  const bucketed = await startServer({ ...s3.env(), SVC_FORGE_A_API_URL: forge.url, SVC_WORKERS: '2', SVC_IMPORT_DIR: importRoot });
  t.teardown(() => bucketed.stop());
  const keyFile = (oid: string): string => join(s3.dir, s3.bucket, 'lfs', 'objects', oid.slice(0, 2), oid.slice(2, 4), `${oid}._S3rver_object`);
  const root = join(importRoot, 'for-bucket');
  const p = plant(root, false, 7);
  const r = (await job('acme/to-bucket', 'import', { layout: 'gitea', source: 'for-bucket' }, 'tok-admin', bucketed)).json();
  t.match(r, { copied: p.good.length, already_stored: 0 });
  await checkImported(t, 'acme/to-bucket', p, r, bucketed, async (oid) => void t.ok(existsSync(keyFile(oid)), `${oid.slice(0, 8)} is a bucket key`), (oid) => !existsSync(keyFile(oid)));
  const again = (await job('acme/to-bucket', 'import', { layout: 'gitea', source: 'for-bucket' }, 'tok-admin', bucketed)).json();
  t.match(again, { imported: p.good.length, copied: 0, already_stored: p.good.length, refused: 2 }, 'a second run finds everything stored');
});

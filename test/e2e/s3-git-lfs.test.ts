import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { startS3Server } from '../helpers/s3-server.js';
import { requestLogBarrier, startServer, tmpDir } from '../helpers/start-server.js';

// The real git-lfs client against SVC_STORE=s3, through the server (proxy) and with presigned
// bucket links (SVC_S3_PRESIGN=true), the bucket being a real S3-protocol server that checks SigV4.
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('studio/proxied', { private: true });
forge.repos.set('studio/signed', { private: true });
forge.repos.set('studio/packed', { private: true });
forge.tokens.set('tok-dev', { login: 'dev', repos: { 'studio/proxied': 'push', 'studio/signed': 'push', 'studio/packed': 'push' } });

const root = tmpDir('stowage-e2e-s3-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const s3 = await startS3Server(join(root, 's3'));
t.teardown(() => s3.stop());

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Writes a few files of different sizes (one over a multipart part) and returns name → sha256. */
function writeFiles(work: string): Record<string, string> {
  const files: Record<string, string> = {};
  for (const [name, size] of [['tiny.bin', 1], ['small.bin', 100_000], ['medium.bin', 12_000_000]] as const) {
    const data = randomBytes(size);
    writeFileSync(join(work, name), data);
    files[name] = sha(data);
  }
  const text = Buffer.from('plain text, so git-lfs sniffs text/plain as its Content-Type\n'.repeat(500));
  writeFileSync(join(work, 'notes.txt'), text);
  files['notes.txt'] = sha(text);
  return files;
}

function objectKeysInBucket(): string[] {
  const dir = join(s3.dir, s3.bucket, 'lfs', 'objects');
  const out: string[] = [];
  const walk = (d: string): void => {
    if (!existsSync(d)) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith('._S3rver_object')) out.push(e.name.replace('._S3rver_object', ''));
    }
  };
  walk(dir);
  return out;
}

// compressed: presign on with SVC_COMPRESSION, so one push mixes presigned objects (the 1-byte one)
// with objects the server compresses, and one clone mixes presigned and proxied downloads.
for (const mode of ['proxy', 'presign', 'compressed'] as const) {
  t.test(`git lfs push and clone, ${mode} mode`, async (t) => {
    const repo = { proxy: 'studio/proxied', presign: 'studio/signed', compressed: 'studio/packed' }[mode];
    const server = await startServer({
      ...s3.env({ SVC_S3_PRESIGN: String(mode !== 'proxy') }),
      SVC_COMPRESSION: mode === 'compressed' ? 'zstd' : 'off',
      SVC_FORGE_A_API_URL: forge.url,
      SVC_LOG_REQUESTS: 'true',
    });
    t.teardown(() => server.stop());
    const dir = join(root, mode);
    const sb = await GitSandbox.create(join(dir, 'home'), server.url, 'tok-dev');
    const { remote, work } = await sb.newProject(dir, `${server.url}/${repo}`);
    const files = writeFiles(work);
    await sb.git(work, 'add', '.');
    await sb.git(work, 'commit', '-qm', 'assets');
    const push = await sb.git(work, 'push', '-q', 'origin', 'main');
    t.notMatch(push.stderr, /error/i, 'push without errors');

    const stored = objectKeysInBucket();
    for (const [name, oid] of Object.entries(files)) t.ok(stored.includes(oid), `${name} is in the bucket under its oid`);

    const routesSeen = (): string[] => server.logs.map((l) => { try { const e = JSON.parse(l) as { route?: string; status?: number }; return e.route === undefined ? '' : e.status === 200 ? e.route : `${e.route}-${e.status}`; } catch { return ''; } });
    // Request log lines are written after each response; let the pipe catch up before counting. Only
    // 200s count: git-lfs sends its first request to a link without credentials and gets a 401.
    const n = Object.keys(files).length;
    // Presigned objects are verified (and promoted) here; proxied uploads carry no verify action,
    // since the PUT itself verifies.
    const verifies = mode === 'presign' ? n : mode === 'compressed' ? 1 : 0;
    await requestLogBarrier(server);
    const routes = routesSeen();
    if (mode === 'presign') {
      t.notOk(routes.includes('upload'), 'no upload went through the server');
      t.equal(routes.filter((r) => r === 'verify').length, Object.keys(files).length, 'each object verified (and promoted) here');
    } else if (mode === 'compressed') {
      t.equal(routes.filter((r) => r === 'upload').length, n - 1, 'all but the 1-byte object uploaded through the server (to be compressed)');
      t.equal(routes.filter((r) => r === 'verify').length, verifies, 'the presigned object verified (and promoted) here; the proxied ones need no verify');
    } else {
      t.equal(routes.filter((r) => r === 'upload').length, Object.keys(files).length, 'each object uploaded through the server once');
      t.equal(routes.filter((r) => r === 'verify').length, verifies, 'no verify requests: the PUT verifies');
    }

    const clone = join(dir, 'clone');
    await sb.git(dir, 'clone', '-q', remote, clone);
    for (const [name, oid] of Object.entries(files)) t.equal(sha(readFileSync(join(clone, name))), oid, `${name} restored byte for byte`);
    await requestLogBarrier(server);
    const after = routesSeen();
    const downloads = after.filter((r) => r === 'download').length;
    if (mode === 'presign') t.equal(downloads, 0, 'downloads went straight to the bucket');
    else if (mode === 'compressed') t.equal(downloads, 1, 'only the compressed object (notes.txt) came through the server');
    else t.equal(downloads, n, 'downloads went through the server');

    const again = await sb.git(work, 'lfs', 'push', '--all', 'origin');
    t.match(again.stdout + again.stderr, /Uploading LFS objects: *100% \(0\/0\)|^$/m, 'nothing re-uploaded');
  });
}

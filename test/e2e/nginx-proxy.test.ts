import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { request as plainRequest } from 'node:http';
import { join } from 'node:path';
import t from 'tap';
import { sha256File, writeRandomFile } from '../helpers/data.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { freePort, hasNginx, selfSignedCert, startNginx, templateConf } from '../helpers/nginx.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// The shipped nginx configuration (deploy/nginx/stowage.conf) in front of a real server, with TLS,
// driven by the real git-lfs client: the documented configuration is the tested one. The large
// object crosses SVC_CHUNKED_UPLOAD_THRESHOLD, so it is uploaded chunked through nginx.
// STOWAGE_E2E_HUGE=0 skips the large object while iterating locally.
const LARGE = process.env.STOWAGE_E2E_HUGE === '0' ? 0 : 1_200_000_000 + 4321;

if (!hasNginx()) {
  t.fail('nginx is not installed: apt-get install -y nginx-light (.ci/run does)');
  t.end();
} else {
  const root = tmpDir('stowage-nginx-');
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set('studio/assets', { private: true });
  forge.tokens.set('tok-dev', { login: 'dev', repos: { 'studio/assets': 'push' } });

  const ports = { https: await freePort(), http: await freePort() };
  const publicUrl = `https://127.0.0.1:${ports.https}`;
  // Links in batch answers must point at the proxy, as SVC_BASE_URL does in production.
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_BASE_URL: publicUrl });
  t.teardown(() => server.stop());
  const { cert, key } = selfSignedCert(root);
  const nginx = await startNginx(tmpDir('stowage-nginx-prefix-'), templateConf({ ...ports, upstreams: [server.port] }, cert, key), ports.https);
  t.teardown(() => nginx.stop());

  const sb = await GitSandbox.create(join(root, 'home'), publicUrl, 'tok-dev');
  // Trust the self-signed certificate the way an operator's private CA would be trusted.
  await sb.git(root, 'config', '--global', 'http.sslCAInfo', cert);
  const ca = readFileSync(cert);
  const accessLines = (): string[] => readFileSync(nginx.accessLog, 'utf8').split('\n');

  t.test('health through TLS, and plain HTTP redirects to https', async (t) => {
    const health = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      request(`${publicUrl}/health`, { ca }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      })
        .on('error', reject)
        .end();
    });
    t.equal(health.status, 200, '/health answers through nginx');
    const redirect = await new Promise<{ status: number; location: string | undefined }>((resolve, reject) => {
      plainRequest(`http://127.0.0.1:${ports.http}/studio/assets/objects/batch`, (res) => {
        res.resume();
        resolve({ status: res.statusCode!, location: res.headers.location });
      })
        .on('error', reject)
        .end();
    });
    t.equal(redirect.status, 301, 'port 80 redirects');
    t.equal(redirect.location, `https://127.0.0.1/studio/assets/objects/batch`, 'to the https address');
  });

  t.test(`git lfs push and clone through nginx${LARGE ? `, a ${LARGE} byte object included` : ''}`, async (t) => {
    const dir = join(root, 'p1');
    const { remote, work } = await sb.newProject(dir, `${publicUrl}/studio/assets`);
    const files: Record<string, string> = {
      'small.bin': await writeRandomFile(join(work, 'small.bin'), 100_000),
      'medium.bin': await writeRandomFile(join(work, 'medium.bin'), 30_000_000),
    };
    if (LARGE) files['large.bin'] = await writeRandomFile(join(work, 'large.bin'), LARGE);
    writeFileSync(join(work, 'notes.txt'), 'text through the proxy\n'.repeat(500));
    files['notes.txt'] = await sha256File(join(work, 'notes.txt'));
    await sb.git(work, 'add', '.');
    await sb.git(work, 'commit', '-qm', 'assets');
    // Keep disk use down: git-lfs's cache holds the object once committed.
    if (LARGE) rmSync(join(work, 'large.bin'));
    const push = await sb.git(work, 'push', '-q', 'origin', 'main');
    t.notMatch(push.stderr, /error/i, 'push without errors');
    rmSync(join(work, '.git', 'lfs', 'objects'), { recursive: true, force: true });

    const clone = join(dir, 'clone');
    await sb.git(dir, 'clone', '-q', remote, clone);
    for (const [name, sha] of Object.entries(files)) t.equal(await sha256File(join(clone, name)), sha, `${name} restored byte for byte`);

    // Every transfer went through nginx, and the large upload went chunked as the batch asked.
    const log = accessLines();
    for (const [name, sha] of Object.entries(files)) {
      t.ok(log.some((l) => l.startsWith(`"PUT /studio/assets/objects/${sha} HTTP/1.1" 200`)), `${name} uploaded through nginx`);
      t.ok(log.some((l) => l.startsWith(`"GET /studio/assets/objects/${sha} HTTP/1.1" 200`)), `${name} downloaded through nginx`);
    }
    if (LARGE) t.ok(log.some((l) => l.startsWith(`"PUT /studio/assets/objects/${files['large.bin']} HTTP/1.1" 200 chunked`)), 'the large object was sent chunked');
    t.notMatch(readFileSync(nginx.errorLog, 'utf8'), /\[(error|crit|alert|emerg)\]/, 'nginx logged no error');
  });
}

import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { chmodSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { MAIN, startServer, tmpDir } from '../helpers/start-server.js';

/**
 * Start-up refusals of the authentication configuration: the server exits
 * non-zero with a one-line reason on stderr, and never starts listening.
 */
function run(env: Record<string, string>): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const dir = tmpDir();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH ?? '', SVC_HOST: '127.0.0.1', SVC_PORT: '0', SVC_DATA_DIR: dir, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      // A server that listens did not refuse: stop it at once (the test then fails on "never listened").
      if (stdout.includes('"listening"')) child.kill('SIGKILL');
    });
    child.on('exit', (code) => {
      rmSync(dir, { recursive: true, force: true });
      resolve({ code, stderr, stdout });
    });
  });
}

const dir = tmpDir('stowage-keys-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const keyFile = join(dir, 'app.pem');
writeFileSync(keyFile, generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }));
const notAKey = join(dir, 'not-a-key.pem');
writeFileSync(notAKey, '-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n');
const ecKey = join(dir, 'ec.pem');
writeFileSync(ecKey, generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }));
const unreadable = join(dir, 'unreadable.pem');
writeFileSync(unreadable, 'x');
chmodSync(unreadable, 0o000);

const refusals: [string, Record<string, string>, RegExp][] = [
  ['forge_c without its URL', { SVC_AUTH: 'forge_c' }, /SVC_FORGE_C_API_URL is required when SVC_AUTH=forge_c/],
  ['forge_d without its URL', { SVC_AUTH: 'forge_d' }, /SVC_FORGE_C_API_URL is required when SVC_AUTH=forge_d/],
  ['an unknown provider', { SVC_AUTH: 'bitbucket' }, /SVC_AUTH must be one of forge_a, forge_b, forge_c, forge_d or github \(forge_a\), gitlab \(forge_b\), gitea \(forge_c\), forgejo \(forge_d\), got "bitbucket"/],
  ['rejection TTL equal to the cache TTL', { SVC_AUTH_CACHE_TTL: '60', SVC_AUTH_REJECTION_TTL: '60' }, /SVC_AUTH_REJECTION_TTL \(60s\) must be shorter than SVC_AUTH_CACHE_TTL \(60s\)/],
  ['rejection TTL longer than the cache TTL', { SVC_AUTH_CACHE_TTL: '10', SVC_AUTH_REJECTION_TTL: '5m' }, /must be shorter than SVC_AUTH_CACHE_TTL/],
  ['app id without key', { SVC_FORGE_A_APP_ID: '123' }, /must be set together/],
  ['key without app id', { SVC_FORGE_A_APP_KEY_FILE: keyFile }, /must be set together/],
  ['key file missing', { SVC_FORGE_A_APP_ID: '123', SVC_FORGE_A_APP_KEY_FILE: join(dir, 'missing.pem') }, /SVC_FORGE_A_APP_KEY_FILE cannot be read: ENOENT/],
  ['key file not a key', { SVC_FORGE_A_APP_ID: '123', SVC_FORGE_A_APP_KEY_FILE: notAKey }, /SVC_FORGE_A_APP_KEY_FILE is not a PEM RSA private key/],
  ['key file not RSA', { SVC_FORGE_A_APP_ID: '123', SVC_FORGE_A_APP_KEY_FILE: ecKey }, /SVC_FORGE_A_APP_KEY_FILE is not a PEM RSA private key/],
  ['bad forge URL', { SVC_AUTH: 'forge_b', SVC_FORGE_B_API_URL: 'gitlab.example.com' }, /SVC_FORGE_B_API_URL must be an absolute/],
];
if (process.getuid?.() !== 0) refusals.push(['key file unreadable', { SVC_FORGE_A_APP_ID: '123', SVC_FORGE_A_APP_KEY_FILE: unreadable }, /SVC_FORGE_A_APP_KEY_FILE cannot be read: EACCES/]);

for (const [name, env, reason] of refusals) {
  t.test(`refuses to start: ${name}`, async (t) => {
    const { code, stderr, stdout } = await run(env);
    t.not(code, 0, 'exit code is not 0');
    t.not(code, null, 'exited by itself');
    t.match(stderr, reason, 'the reason is on stderr');
    t.equal(stderr.trim().split('\n').length, 1, 'in one line');
    t.notMatch(stdout, /"listening"/, 'never listened');
  });
}

t.test('starts with a complete app identity and with forge_c/forge_d given their URL', async (t) => {
  const envs: Record<string, string>[] = [
    { SVC_FORGE_A_APP_ID: '123', SVC_FORGE_A_APP_KEY_FILE: keyFile },
    { SVC_AUTH: 'forge_c', SVC_FORGE_C_API_URL: 'http://127.0.0.1:9/api/v1' },
    { SVC_AUTH: 'forge_d', SVC_FORGE_C_API_URL: 'http://127.0.0.1:9/api/v1' },
    { SVC_AUTH: 'forge_b' },
  ];
  for (const env of envs) {
    const server = await startServer(env);
    t.teardown(() => server.stop());
    t.ok(server.port > 0, `listening with ${Object.keys(env).join(', ')}`);
  }
});

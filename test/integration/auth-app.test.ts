import t from 'tap';
import { request } from 'undici';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { appKey } from '../helpers/github-app-key.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

/**
 * forge_a's app identity end to end (docs/behaviour.md, "Anonymous read and app identity"): a real RSA key generated
 * here, the PEM handed to the real server, the emulator checking every JWT's RS256 signature.
 */

const LFS = 'application/vnd.git-lfs+json';

async function batch(server: RunningServer, repo: string, token: string | null, operation = 'download'): Promise<number> {
  const headers: Record<string, string> = { 'content-type': LFS, accept: LFS };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  const res = await request(`${server.url}/${repo}/objects/batch`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ operation, objects: [{ oid: 'c'.repeat(64), size: 1 }] }),
  });
  await res.body.dump();
  return res.statusCode;
}

t.test('anonymous lookups run as the app', async (t) => {
  const { keyFile, publicKey } = appKey(t);

  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  gh.app = { appId: '31337', publicKey };
  gh.installations.set('acme', { id: 1001 });
  gh.repos.set('acme/public', { private: false });
  gh.repos.set('acme/public2', { private: false });
  gh.repos.set('acme/private', { private: true });
  gh.repos.set('elsewhere/public', { private: false });
  gh.tokens.set('user-token', { login: 'octo', repos: { 'acme/private': 'push' } });

  const server = await startServer({ SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: gh.url, SVC_FORGE_A_APP_ID: '31337', SVC_FORGE_A_APP_KEY_FILE: keyFile });
  t.teardown(() => server.stop());

  t.equal(await batch(server, 'acme/public', null), 200, 'a public repository reads anonymously');
  t.equal(gh.minted.length, 1, 'an installation token was minted with a JWT the forge accepted');
  t.same(gh.appCalls.map((c) => c.path), ['/repos/acme/public/installation', '/app/installations/1001/access_tokens']);
  const appToken = gh.minted[0]!.token;
  t.equal(gh.lookups.at(-1)!.token, appToken, 'the repository lookup ran as the app');

  t.equal(await batch(server, 'acme/public2', null), 200);
  t.equal(gh.minted.length, 1, 'the token is cached per organization');
  t.equal(gh.lookups.at(-1)!.token, appToken);

  t.equal(await batch(server, 'acme/private', null), 401, 'the app can see the private repository, but it is not public: no anonymous read');
  t.equal(gh.lookups.at(-1)!.token, appToken);

  t.equal(await batch(server, 'elsewhere/public', null), 200, 'not installed there → plain anonymous lookup');
  t.equal(gh.lookups.at(-1)!.token, null, 'the fallback carried no credential');
  t.ok(gh.appCalls.some((c) => c.path === '/repos/elsewhere/public/installation'), 'the installation was looked up and not found');

  t.equal(await batch(server, 'acme/private', 'user-token', 'upload'), 200, 'an authenticated client is checked with its own token');
  t.equal(gh.lookups.at(-1)!.token, 'user-token', 'never with the app token');
  t.equal(await batch(server, 'acme/public', null, 'upload'), 401, 'anonymous never writes');
});

t.test('without the app, anonymous lookups are plain', async (t) => {
  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  gh.repos.set('acme/public', { private: false });
  const server = await startServer({ SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: gh.url });
  t.teardown(() => server.stop());
  t.equal(await batch(server, 'acme/public', null), 200);
  t.equal(gh.lookups.at(-1)!.token, null);
  t.equal(gh.appCalls.length, 0);
});

import t, { type Test } from 'tap';
import { GiteaEmulator, GitHubEmulator, GitLabEmulator, type EmulatorBase } from '../helpers/forge-emulator.js';
import { basic, batch, http, type Reply } from '../helpers/lfs-http.js';
import { appKey } from '../helpers/github-app-key.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

/**
 * The one server-wide lookup budget counts every HTTP call made to the forge (installation
 * lookups, token mints, GitLab's /job fallback and its second /projects call), not one per cache
 * miss; a token the forge refused is remembered for every repository; a token no forge could issue
 * never reaches it; the budget's state shows on /metrics.
 */

const BUDGET = 10;
const FLOOD = 15;

/** The most forge calls received within any one minute (the budget's sliding window). */
function mostInAMinute(forge: EmulatorBase): number {
  const at = forge.requests.map((r) => r.at).sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; j < at.length; j++) {
    while (at[j]! - at[i]! >= 60_000) i++;
    most = Math.max(most, j - i + 1);
  }
  return most;
}

/** A download batch for one object: enough to make the server ask the forge. */
function ask(server: RunningServer, repo: string, token: string | null): Promise<Reply> {
  return batch(server.url, repo, token, 'download', [{ oid: 'b'.repeat(64), size: 1 }]);
}

async function metric(server: RunningServer, name: string): Promise<number | null> {
  const text = (await http('GET', `${server.url}/metrics`)).body.toString('utf8');
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

/** Past the budget: 503 with our Retry-After and the Git LFS error body, never the forge's word. */
function checkRefusal(t: Test, res: Reply, what: string): void {
  if (res.status === 200 || res.status === 401 || res.status === 404) return;
  t.equal(res.status, 503, `${what}: past the budget → 503`);
  t.match(res.json(), { message: String }, `${what}: a Git LFS error body`);
  t.ok(Number(res.headers['retry-after']) >= 1, `${what}: with Retry-After`);
}

t.test('GitHub with the app identity: installation lookups and mints count', async (t) => {
  const { keyFile, publicKey } = appKey(t);
  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  gh.app = { appId: '99', publicKey };
  for (let i = 0; i < FLOOD; i++) {
    gh.repos.set(`org${i}/r`, { private: false });
    gh.installations.set(`org${i}`, { id: 500 + i });
  }
  const server = await startServer({ SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: gh.url, SVC_FORGE_A_APP_ID: '99', SVC_FORGE_A_APP_KEY_FILE: keyFile, SVC_AUTH_LOOKUP_BUDGET: String(BUDGET) });
  t.teardown(() => server.stop());

  t.equal(await metric(server, 'svc_forge_lookup_budget_limit'), BUDGET, '/metrics shows the budget');
  t.equal(await metric(server, 'svc_forge_lookup_budget_used'), 0, 'and nothing spent yet');
  let ok = 0;
  for (let i = 0; i < FLOOD; i++) {
    const res = await ask(server, `org${i}/r`, null);
    if (res.status === 200) ok++;
    checkRefusal(t, res, `org${i}`);
  }
  t.ok(ok >= 1, `some anonymous reads were answered (${ok})`);
  t.ok(gh.appCalls.length > 0, 'the app identity was used');
  t.ok(mostInAMinute(gh) <= BUDGET, `the forge received ${gh.requests.length} calls (${gh.appCalls.length} app calls) for a budget of ${BUDGET}`);
  const used = await metric(server, 'svc_forge_lookup_budget_used');
  t.ok(used !== null && used >= 1 && used <= BUDGET, `/metrics shows the calls spent (${used})`);
});

t.test('GitLab: the 401 → /job fallback and the job path\'s second call count', async (t) => {
  const gl = new GitLabEmulator();
  await gl.start();
  t.teardown(() => gl.stop());
  gl.repos.set('acme/game', { visibility: 'private' });
  gl.repos.set('acme/other', { visibility: 'private' });
  gl.repos.set('acme/public', { visibility: 'public' });
  for (let i = 0; i < FLOOD; i++) gl.tokens.set(`glcbt-64_job${i}`, { username: 'job', kind: 'job', project: 'acme/other', jobUser: 'dev' });
  const personal = await startServer({ SVC_AUTH: 'forge_b', SVC_FORGE_B_API_URL: gl.apiUrl, SVC_AUTH_LOOKUP_BUDGET: String(BUDGET) });
  t.teardown(() => personal.stop());

  for (let i = 0; i < FLOOD; i++) checkRefusal(t, await ask(personal, 'acme/game', `glpat-unknown-${i}`), `unknown token ${i}`);
  t.ok(gl.jobLookups.length > 0, 'unknown personal tokens were tried as job tokens');
  t.ok(mostInAMinute(gl) <= BUDGET, `personal tokens: the forge received ${gl.requests.length} calls (${gl.jobLookups.length} to /job) for a budget of ${BUDGET}`);

  await personal.stop();
  gl.requests.length = 0;
  gl.jobLookups.length = 0;
  const jobs = await startServer({ SVC_AUTH: 'forge_b', SVC_FORGE_B_API_URL: gl.apiUrl, SVC_AUTH_LOOKUP_BUDGET: String(BUDGET) });
  t.teardown(() => jobs.stop());
  let ok = 0;
  for (let i = 0; i < FLOOD; i++) {
    const res = await ask(jobs, 'acme/public', `glcbt-64_job${i}`);
    if (res.status === 200) ok++;
    checkRefusal(t, res, `job token ${i}`);
  }
  t.ok(ok >= 1, `job tokens read the public project (${ok})`);
  t.ok(mostInAMinute(gl) <= BUDGET, `job tokens: the forge received ${gl.requests.length} calls (${gl.jobLookups.length} to /job) for a budget of ${BUDGET}`);
});

t.test('Gitea: every call counts', async (t) => {
  const gt = new GiteaEmulator('gitea');
  await gt.start();
  t.teardown(() => gt.stop());
  gt.repos.set('acme/game', { private: true });
  const server = await startServer({ SVC_AUTH: 'forge_c', SVC_FORGE_C_API_URL: gt.apiUrl, SVC_AUTH_LOOKUP_BUDGET: String(BUDGET) });
  t.teardown(() => server.stop());
  for (let i = 0; i < FLOOD; i++) checkRefusal(t, await ask(server, 'acme/game', `unknown-${i}`), `unknown token ${i}`);
  t.ok(mostInAMinute(gt) <= BUDGET, `the forge received ${gt.requests.length} calls for a budget of ${BUDGET}`);
});

t.test('cheap refusals: a refused token is remembered for every repository; an impossible one never asks', async (t) => {
  const gh = new GitHubEmulator();
  await gh.start();
  t.teardown(() => gh.stop());
  for (const r of ['a', 'b', 'c']) gh.repos.set(`acme/${r}`, { private: true });
  const server = await startServer({ SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: gh.url });
  t.teardown(() => server.stop());

  for (const r of ['a', 'b', 'c']) t.equal((await ask(server, `acme/${r}`, 'ghp_unknown')).status, 401, `acme/${r}: a token the forge does not know → 401`);
  t.equal(gh.requests.length, 1, 'one forge call for the token, whatever the repository');

  const before = gh.requests.length;
  const long = 'x'.repeat(513);
  const res = await ask(server, 'acme/a', long);
  t.equal(res.status, 401, 'a token over 512 bytes → 401');
  t.match(res.headers['lfs-authenticate'], /^Basic /, 'with the challenge');
  t.match(res.json(), { message: /forge token/ }, 'and a Git LFS error body saying why');
  t.equal(gh.requests.length, before, 'without asking the forge');
  t.equal((await ask(server, 'acme/a', 'y'.repeat(512))).status, 401, 'a 512-byte token is still asked about');
  t.equal(gh.requests.length, before + 1, 'and the forge was asked');

  // The same over the object route, with Basic.
  const get = await http('GET', `${server.url}/acme/a/objects/${'c'.repeat(64)}`, { headers: { authorization: basic('z'.repeat(600)) } });
  t.equal(get.status, 401);
  t.equal(gh.requests.length, before + 1, 'a GET with an impossible token never asks either');
});

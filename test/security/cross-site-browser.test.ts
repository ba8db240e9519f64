import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, blob, http, push } from '../helpers/lfs-http.js';
import { startServer } from '../helpers/start-server.js';

/**
 * Cross-site request forgery in a real browser (Debian's Chromium): a user opens the repository
 * page, which asks for Basic credentials, so the browser carries them to every later request to the
 * host. A page on another origin then makes the browser submit forms to the state-changing routes
 * (the three content types a form can send without a preflight) and fire no-cors fetches at them.
 * Nothing may change: the object stays, the lock stays, no job runs. The raw-request twin of this
 * file, covering every route, is cross-site.test.ts.
 */

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const LAUNCH_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const REPO = 'acme/game';
const TOKEN = 'tok-owner';

t.test('cross-site requests from a real browser', async (t) => {
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set(REPO, { private: true });
  forge.tokens.set(TOKEN, { login: 'owner', repos: { [REPO]: 'admin' } });
  // No grace: a retain that got through would delete the object at once.
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_GC_GRACE: '0', SVC_LOG_REQUESTS: 'true' });
  t.teardown(() => server.stop());

  const asset = blob(4096);
  t.equal(await push(server.url, REPO, TOKEN, asset), 200, 'the asset is uploaded');
  const lock = await http('POST', `${server.url}/${REPO}/locks`, {
    headers: { authorization: basic(TOKEN), 'content-type': 'application/vnd.git-lfs+json', accept: 'application/vnd.git-lfs+json' },
    body: JSON.stringify({ path: 'art/hero.psd' }),
  });
  t.equal(lock.status, 201, 'a lock is taken');
  const lockId: string = lock.json().lock.id;

  /** The attacker's site: a page per attack, on an origin of its own (another port). */
  const attacks = new Map<string, string>();
  const evil: Server = createServer((req, res) => {
    const page = attacks.get(req.url ?? '');
    res.writeHead(page === undefined ? 404 : 200, { 'content-type': 'text/html' });
    res.end(page ?? '');
  });
  await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => evil.close(() => resolve())));
  const evilOrigin = `http://127.0.0.1:${(evil.address() as AddressInfo).port}`;

  const target = (path: string): string => `${server.url}/${REPO}${path}`;
  /** A form that submits itself on load; a text/plain form sends `name=value`, so the JSON is split across them. */
  const formPage = (action: string, enctype: string, name: string, value: string): string =>
    `<!doctype html><form id="f" method="POST" action="${action}" enctype="${enctype}"><input name='${name}' value='${value}'></form><script>document.getElementById('f').submit()</script>`;
  const FORMS: Record<string, [string, string]> = {
    retain: ['/objects/retain', '{"oids":[],"x":"'],
    audit: ['/objects/audit', '{"quarantine":true,"x":"'],
    compress: ['/objects/compress', '{"x":"'],
    dedupe: ['/objects/dedupe', '{"x":"'],
    unlock: [`/locks/${lockId}/unlock`, '{"force":true,"x":"'],
  };
  const ENCTYPES = ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data'];
  for (const [name, [path, json]] of Object.entries(FORMS)) {
    for (const enctype of ENCTYPES) attacks.set(`/${name}-${enctype.replace('/', '-')}`, formPage(target(path), enctype, json, '"}'));
  }
  // no-cors fetches: the browser sends them (with credentials) and hides only the answer from the page.
  attacks.set('/fetch', `<!doctype html><script>
    const opts = (body, type) => ({ method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'Content-Type': type }, body });
    Promise.allSettled([
      fetch(${JSON.stringify(target('/objects/retain'))}, opts('{"oids":[]}', 'text/plain')),
      fetch(${JSON.stringify(target(`/locks/${lockId}/unlock`))}, opts('{"force":true}', 'text/plain')),
      fetch(${JSON.stringify(target('/objects/batch'))}, opts('{"operation":"download","objects":[]}', 'text/plain')),
      fetch(${JSON.stringify(target(`/locks/${lockId}/unlock`))}, opts('', 'text/plain')),
    ]).then(() => { document.title = 'sent'; });
  </script>`);

  const browser: Browser = await chromium.launch({ executablePath: CHROMIUM, args: LAUNCH_ARGS });
  t.teardown(() => browser.close());
  // The credentials a user typed into the repository page's prompt: the browser answers every
  // challenge from this host with them, as it does after the user signed in once.
  const context = await browser.newContext({ httpCredentials: { username: 'git', password: TOKEN } });
  const page = await context.newPage();

  const repoPage = await page.goto(`${server.url}/${REPO}`);
  t.equal(repoPage?.status(), 200, 'the user opened the repository page with their credentials');

  await t.test('auto-submitted forms from another origin change nothing', async (t) => {
    for (const [name] of Object.entries(FORMS)) {
      for (const enctype of ENCTYPES) {
        const from = server.logs.length;
        await page.goto(`${evilOrigin}/${name}-${enctype.replace('/', '-')}`);
        // The submission's own answer is the event: the server logs one request line for it.
        const line = await server.waitForLog((ev) => ev.msg === 'request' && ev.method === 'post' && ev.status !== 401, `the ${name} form's request`, from);
        t.ok(line.status === 403 || line.status === 415, `${name} as ${enctype}: refused (${line.status})`);
      }
    }
  });

  await t.test('no-cors fetches from another origin change nothing', async (t) => {
    const from = server.logs.length;
    await page.goto(`${evilOrigin}/fetch`);
    await page.waitForFunction(() => document.title === 'sent');
    const lines = await server.waitForLogs((ev) => ev.msg === 'request' && ev.method === 'post' && ev.status !== 401, 4, 'the four fetches', from);
    for (const line of lines) t.ok(line.status === 403 || line.status === 415, `${line.route}: refused (${line.status})`);
  });

  await t.test('the object and the lock are still there', async (t) => {
    const got = await http('GET', target(`/objects/${asset.oid}`), { headers: { authorization: basic(TOKEN) } });
    t.equal(got.status, 200, 'the object downloads');
    t.ok(got.body.equals(asset.data), 'whole');
    const locks = await http('GET', target('/locks'), { headers: { authorization: basic(TOKEN), accept: 'application/vnd.git-lfs+json' } });
    t.same(locks.json().locks.map((l: { id: string }) => l.id), [lockId], 'the lock is held');
    const jobs = await http('GET', target('/objects/jobs'), { headers: { authorization: basic(TOKEN) } });
    t.same(jobs.json().jobs, [], 'no maintenance job ran');
  });
});

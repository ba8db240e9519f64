import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { batch, blob, push } from '../helpers/lfs-http.js';
import { startServer } from '../helpers/start-server.js';

/**
 * The dashboard in a real headless Chromium (Debian's `chromium` package): sign in, see the
 * figures, change the maximum object size in the form, and see a batch refuse an object over it.
 * Also fails on any console error, which is how a CSP violation of the inline script would show.
 */

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const REPO = 'acme/widgets';

t.test('dashboard click-through in headless Chromium', async (t) => {
  if (!existsSync(CHROMIUM)) {
    t.fail(`${CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium) or set CHROMIUM_PATH`);
    return;
  }
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set(REPO, { private: true });
  forge.tokens.set('root-token', { login: 'root', siteAdmin: true, repos: {} });
  forge.tokens.set('writer', { login: 'wendy', repos: { [REPO]: 'push' } });

  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url });
  t.teardown(() => server.stop());
  const base = server.url;

  const seeded = [blob(3000), blob(70_000)];
  for (const b of seeded) t.equal(await push(base, REPO, 'writer', b), 200, 'seed object uploaded');

  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  t.teardown(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const consoleErrors: string[] = [];
  page.on('console', (m) => {
    // HTTP errors are logged as "Failed to load resource" (the favicon, the refused sign-in): expected.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  await page.goto(`${base}/-/`);
  t.equal(await page.locator('#signin-form').count(), 1, 'sign-in form shown without a session');

  // A wrong token: the message shows, no dialog, still signed out.
  await page.fill('#token', 'nope');
  await page.click('#signin');
  await page.waitForSelector('#msg.error');
  t.match(await page.textContent('#msg'), /did not accept/);

  await page.fill('#token', 'root-token');
  await page.click('#signin');
  await page.waitForSelector('#user');
  t.equal(await page.textContent('#user'), 'root', 'signed in as the forge admin');

  const field = async (name: string): Promise<number> => Number(await page.getAttribute(`[data-field="${name}"]`, 'value'));
  t.equal(await field('repositories'), 1);
  t.equal(await field('objects'), 2);
  t.equal(await field('logical_bytes'), 73_000);
  t.equal(await field('uploads_last_hour'), 2);
  t.ok((await field('stored_bytes')) > 0);
  for (const plot of ['Storage over time', 'Savings', 'Transfer rates', 'Rejections by cause']) {
    t.equal(await page.locator(`svg[aria-label="${plot}"]`).count(), 1, `plot: ${plot}`);
  }

  // Change a setting in the form and watch the batch obey it.
  await page.fill('#max_object_size', '10KiB');
  await page.click('#access-save');
  await page.waitForSelector('#msg.ok');
  t.match(await page.textContent('#msg'), /max object size 10240 bytes/);
  await page.waitForSelector('[data-field="access_source"]:has-text("Saved by root")');
  t.equal(await page.inputValue('#max_object_size'), '10240', 'the reloaded form shows the saved value');

  const big = blob(20_000);
  const small = blob(5000);
  const res = await batch(base, REPO, 'writer', 'upload', [{ oid: big.oid, size: big.size }, { oid: small.oid, size: small.size }]);
  t.equal(res.status, 200);
  t.equal(res.json().objects[0].error?.code, 422, 'the over-size object is refused');
  t.ok(res.json().objects[1].actions?.upload, 'the small one may upload');

  // The refusal shows in the rejections plot after a reload.
  await page.reload();
  await page.waitForSelector('#user');
  t.match(await page.locator('svg[aria-label="Rejections by cause"]').innerHTML(), /object_too_large/);

  await page.screenshot({ path: '/tmp/stowage-dashboard.png', fullPage: true });

  await page.click('#signout');
  await page.waitForSelector('#signin-form');
  t.pass('signed out');
  t.same(consoleErrors, [], 'no console errors (CSP violations would show here)');
});

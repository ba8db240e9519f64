import { execFileSync } from 'node:child_process';
import { constants, existsSync, unlinkSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, push } from '../helpers/lfs-http.js';
import { startServer } from '../helpers/start-server.js';

/**
 * The dashboard in a real headless Chromium (Debian's `chromium` package): sign in, see the
 * figures, change the maximum object size in the form, and see a batch refuse an object over it;
 * then the layout at 390 and 1280 px in both colour schemes, the repository list, and an audit
 * job followed live to its outcome. Screenshots go to /tmp/stowage-dashboard-*.png.
 * Also fails on any console error, which is how a CSP violation of the inline script would show.
 */

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const REPO = 'acme/widgets';
const AUDITED = 'acme/gadgets';
const LAUNCH_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** What the layout checks read from the page: widths, the body's colours, the smallest plot text and header contrast. */
interface Layout {
  readonly docWidth: number;
  readonly viewport: number;
  /** Relative luminance of the body's background and text (0 black … 1 white). */
  readonly bgLum: number;
  readonly fgLum: number;
  /** The smallest plot text as drawn on screen, in px (font size × the SVG's scale). */
  readonly minPlotText: number;
  /** The lowest contrast of any header text against the background behind it (WCAG ratio). */
  readonly headerContrast: number;
}

/** Measures the page as drawn (WCAG 2 relative luminance and contrast, computed styles). */
function measure(page: Page): Promise<Layout> {
  return page.evaluate(() => {
    const rgb = (c: string): number[] => (c.match(/[\d.]+/g) ?? []).map(Number);
    const lum = (c: string): number => {
      const [r, g, b] = rgb(c).map((v) => {
        const s = v / 255;
        return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
    };
    const bgOf = (el: Element | null): string => {
      for (let e = el; e !== null; e = e.parentElement) {
        const bg = getComputedStyle(e).backgroundColor;
        const a = rgb(bg)[3];
        if (bg !== 'transparent' && a !== 0) return bg;
      }
      return 'rgb(255, 255, 255)';
    };
    let headerContrast = Infinity;
    for (const el of document.querySelectorAll('header, header *')) {
      const hasText = [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent!.trim() !== '');
      if (!hasText) continue;
      // The text's colour as drawn: blended with the background by its own and its parents' opacity.
      let alpha = 1;
      for (let e: Element | null = el; e !== null; e = e.parentElement) alpha *= Number(getComputedStyle(e).opacity);
      const bg = rgb(bgOf(el));
      const fg = rgb(getComputedStyle(el).color).slice(0, 3).map((v, i) => alpha * v + (1 - alpha) * bg[i]!);
      const [a, b] = [lum(`rgb(${fg.join(',')})`), lum(`rgb(${bg.slice(0, 3).join(',')})`)].sort((x, y) => y - x);
      headerContrast = Math.min(headerContrast, (a! + 0.05) / (b! + 0.05));
    }
    let minPlotText = Infinity;
    for (const el of document.querySelectorAll<SVGTextElement>('main svg[role="img"] text')) {
      if (getComputedStyle(el).display === 'none') continue;
      const scale = el.getScreenCTM()?.a ?? 1;
      minPlotText = Math.min(minPlotText, scale * parseFloat(getComputedStyle(el).fontSize));
    }
    const body = getComputedStyle(document.body);
    return {
      docWidth: document.documentElement.scrollWidth,
      viewport: window.innerWidth,
      bgLum: lum(body.backgroundColor),
      fgLum: lum(body.color),
      minPlotText,
      headerContrast,
    };
  });
}

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
  forge.repos.set(AUDITED, { private: true });
  forge.tokens.set('writer', { login: 'wendy', repos: { [REPO]: 'push', [AUDITED]: 'push' } });

  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url });
  // The audited object's file becomes a FIFO below; a blocked audit would hold the server's stop,
  // so the stop opens it for writing first (non-blocking: a no-op when no reader waits).
  let fifo: string | null = null;
  t.teardown(async () => {
    if (fifo !== null) await open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).then((f) => f.close(), () => undefined);
    await server.stop();
  });
  const base = server.url;

  const seeded = [blob(3000), blob(70_000)];
  for (const b of seeded) t.equal(await push(base, REPO, 'writer', b), 200, 'seed object uploaded');
  const audited = blob(1 << 20);
  t.equal(await push(base, AUDITED, 'writer', audited), 200, 'object to audit uploaded');

  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: LAUNCH_ARGS,
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
  t.equal(await field('repositories'), 2);
  t.equal(await field('objects'), 3);
  t.equal(await field('logical_bytes'), 73_000 + (1 << 20));
  t.equal(await field('uploads_last_hour'), 3);
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

  // Plots: round ticks in binary units, titled axes, more than two time labels, per-second rates.
  const storage = page.locator('svg[aria-label="Storage over time"]');
  const storageText = await storage.locator('text').allTextContents();
  t.ok(storageText.includes('Time (UTC)') && storageText.includes('Bytes'), 'both axes titled');
  t.ok(storageText.filter((s) => /^\d\d:\d\d$/.test(s)).length > 2, 'more than two time labels');
  t.ok(storageText.filter((s) => /^\d+(\.5)? (B|KiB|MiB)$/.test(s)).length >= 2, `round byte ticks: ${storageText.join(' | ')}`);
  t.ok((await page.locator('svg[aria-label="Transfer rates"] text').allTextContents()).some((s) => /^\d+(\.\d+)? (B|KiB|MiB)\/s$/.test(s)), 'rates per second with units');

  // The repository list links each repository's page (which asks for a forge token: Basic).
  t.same(await page.locator('table.repos a').evaluateAll((as) => as.map((a) => a.getAttribute('href'))), [`/${AUDITED}`, `/${REPO}`], 'every repository listed, by name');

  // An audit that stays running until the test lets it go: the object's file is replaced by a
  // FIFO, so the audit's read waits for a writer (no clock involved), then reads nothing: corrupt.
  const objectPath = join(server.dataDir, 'objects', audited.oid.slice(0, 2), audited.oid.slice(2, 4), audited.oid);
  t.ok(existsSync(objectPath), 'object stored as a file');
  unlinkSync(objectPath);
  execFileSync('mkfifo', [objectPath]);
  fifo = objectPath;
  const started = await http('POST', `${base}/${AUDITED}/objects/audit`, { headers: { authorization: basic('writer'), 'content-type': 'application/json' }, body: '{"wait": false}' });
  t.equal(started.status, 202, 'audit started');

  const schemes = ['light', 'dark'] as const;
  for (const width of [390, 1280]) {
    for (const scheme of schemes) {
      await page.setViewportSize({ width, height: 900 });
      await page.emulateMedia({ colorScheme: scheme });
      await page.reload();
      await page.waitForSelector('#user');
      const m = await measure(page);
      t.ok(m.docWidth <= m.viewport, `${width} px ${scheme}: document ${m.docWidth} px wide fits the ${m.viewport} px viewport`);
      if (scheme === 'dark') t.ok(m.bgLum < 0.05 && m.fgLum > 0.6, `dark scheme renders dark (background ${m.bgLum.toFixed(3)}, text ${m.fgLum.toFixed(3)})`);
      else t.ok(m.bgLum > 0.8 && m.fgLum < 0.1, `light scheme renders light (background ${m.bgLum.toFixed(3)})`);
      t.ok(m.minPlotText >= 11, `${width} px ${scheme}: plot text at least 11 px (smallest ${m.minPlotText.toFixed(1)})`);
      t.ok(m.headerContrast >= 4.5, `${width} px ${scheme}: header contrast ${m.headerContrast.toFixed(2)}:1`);
      await page.screenshot({ path: `/tmp/stowage-dashboard-${width}-${scheme}.png`, fullPage: true });
      // A long narrow page shrinks when viewed whole: also in screen-high parts, for a person to look at.
      const height = await page.evaluate(() => document.documentElement.scrollHeight);
      for (let y = 0, i = 1; width < 600 && y < height; y += 900, i++) {
        await page.screenshot({ path: `/tmp/stowage-dashboard-${width}-${scheme}-${i}.png`, fullPage: true, clip: { x: 0, y, width, height: Math.min(900, height - y) } });
      }
    }
  }

  // The running audit has a named progress bar (what a screen reader announces).
  const bar = page.getByRole('progressbar', { name: new RegExp(`^audit of ${AUDITED}: `) });
  t.equal(await bar.count(), 1, `running job's progress bar has an accessible name: ${await page.locator('#jobs progress').first().getAttribute('aria-label')}`);
  t.same(await page.locator('progress:not([aria-label])').count(), 0, 'no unnamed progress bar');

  // Let the audit go and watch the page, without a reload, show what it found.
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.emulateMedia({ colorScheme: 'light' });
  const pageLoads: string[] = [];
  page.on('load', () => pageLoads.push('load'));
  const writer = await open(objectPath, 'w'); // waits for the audit's read to open it
  await writer.close();
  const outcome = page.locator('#jobs [data-outcome]').first();
  await outcome.waitFor();
  t.equal(await outcome.getAttribute('data-outcome'), 'problems', 'the finished audit reads "problems found", not "done"');
  t.equal(await outcome.textContent(), 'problems found');
  t.match(await outcome.locator('xpath=ancestor::tr').textContent(), /1 corrupt/, 'with what it found');
  t.same(pageLoads, [], 'updated by the jobs poll, not a page reload');
  await page.screenshot({ path: '/tmp/stowage-dashboard-job.png', fullPage: true });

  // The list shows the audit's verdict, and its link opens the repository page (Basic credentials).
  await page.reload();
  t.match(await page.locator('table.repos tr', { hasText: AUDITED }).textContent(), /problems found/);
  const reader = await browser.newContext({ httpCredentials: { username: 'token', password: 'writer' }, viewport: { width: 390, height: 900 } });
  t.teardown(() => reader.close());
  await reader.addCookies(await page.context().cookies());
  const repoPage = await reader.newPage();
  await repoPage.goto(`${base}/-/`);
  await repoPage.click(`table.repos a[href="/${AUDITED}"]`);
  await repoPage.waitForSelector('[data-field="last_audit"]');
  t.equal(await repoPage.textContent('h1'), AUDITED, 'the link opens the repository page');
  t.match(await repoPage.textContent('[data-field="last_audit"]'), /problems found/);
  const rm = await measure(repoPage);
  t.ok(rm.docWidth <= rm.viewport, `repository page fits 390 px (${rm.docWidth} px)`);
  t.ok(rm.minPlotText >= 11, `repository page plot text at least 11 px (${rm.minPlotText.toFixed(1)})`);
  await repoPage.screenshot({ path: '/tmp/stowage-repo-390.png', fullPage: true });

  await page.click('#signout');
  await page.waitForSelector('#signin-form');
  t.pass('signed out');
  t.same(consoleErrors, [], 'no console errors (CSP violations would show here)');
});

import Database from 'better-sqlite3';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, blob, http, LFS, push } from '../helpers/lfs-http.js';
import { startServer } from '../helpers/start-server.js';

/**
 * The repository page and objects/stats against the real server: the same numbers in both, pull
 * needed, locks with owner and age, "never audited" until an audit result exists.
 */

const REPO = 'acme/widgets';

/** Every `data-field` figure of a page: field → exact value. */
function fields(html: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of html.matchAll(/<data data-field="([^"]+)" value="([^"]*)">/g)) out[m[1]!] = m[2]!;
  return out;
}

t.test('repository page and stats JSON', async (t) => {
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set(REPO, { private: true });
  forge.repos.set('acme/other', { private: true });
  forge.tokens.set('writer', { login: 'wendy', repos: { [REPO]: 'push', 'acme/other': 'push' } });
  forge.tokens.set('reader', { login: 'rita', repos: { [REPO]: 'pull' } });
  forge.tokens.set('stranger', { login: 'sam', repos: {} });

  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_LOCK_MAX_AGE: '1h' });
  t.teardown(() => server.stop());
  const base = server.url;

  // Empty repository first: zeros and an empty histogram, never NaN.
  const empty = await http('GET', `${base}/${REPO}/objects/stats`, { headers: { authorization: basic('reader') } });
  t.equal(empty.status, 200);
  t.match(empty.headers['content-type'], /^application\/json/);
  const e = empty.json();
  t.same([e.objects, e.logical_bytes, e.stored_bytes, e.saving_ratio], [0, 0, 0, 0]);
  t.equal(e.size_histogram.length, 13, 'every bucket present');
  t.equal(e.last_audit, null);

  // Sizes chosen to land in distinct buckets: <1K, 1K–4K, 16K–64K, 256K–1M (×2).
  const blobs = [blob(100), blob(2000), blob(20_000), blob(300_000), blob(700_000)];
  for (const b of blobs) t.equal(await push(base, REPO, 'writer', b), 200, `push ${b.size}`);
  // Another repository's object must not show here (presence is per repository).
  t.equal(await push(base, 'acme/other', 'writer', blob(5000)), 200);
  // The same bytes in a second repository: stats of REPO must not change or reveal the sharing.
  t.equal(await push(base, 'acme/other', 'writer', blobs[4]!), 200);

  const lock = await http('POST', `${base}/${REPO}/locks`, {
    headers: { authorization: basic('writer'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ path: 'art/hero.psd' }),
  });
  t.equal(lock.status, 201, 'lock taken');
  // Age the lock past SVC_LOCK_MAX_AGE directly in the index, so the page must mark it stale.
  const db = new Database(join(server.dataDir, 'index.sqlite'));
  t.teardown(() => db.close());
  db.prepare('UPDATE locks SET locked_at = ? WHERE path = ?').run(Date.now() - 2 * 3600_000, 'art/hero.psd');
  const lock2 = await http('POST', `${base}/${REPO}/locks`, {
    headers: { authorization: basic('writer'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ path: 'art/fresh.psd' }),
  });
  t.equal(lock2.status, 201);

  const statsRes = await http('GET', `${base}/${REPO}/objects/stats`, { headers: { authorization: basic('reader') } });
  t.equal(statsRes.status, 200);
  const s = statsRes.json();
  const logical = blobs.reduce((a, b) => a + b.size, 0);
  t.equal(s.repository, REPO);
  t.equal(s.objects, blobs.length);
  t.equal(s.logical_bytes, logical);
  t.ok(s.stored_bytes > 0, 'stored bytes recorded');
  t.equal(s.saved_bytes, s.logical_bytes - s.stored_bytes);
  t.equal(s.largest_objects.length, 5);
  t.same(s.largest_objects.map((o: { size: number }) => o.size), [700_000, 300_000, 20_000, 2000, 100], 'largest first');
  t.equal(s.largest_objects[0].oid, blobs[4]!.oid);
  const counts = s.size_histogram.map((b: { count: number }) => b.count);
  t.same(counts.slice(0, 6), [1, 1, 0, 1, 0, 2], 'histogram buckets');
  t.equal(counts.reduce((a: number, b: number) => a + b, 0), 5);
  t.equal(s.size_histogram[0].min, 0);
  t.equal(s.size_histogram[12].max, null);
  t.equal(s.locks.available, true);
  t.equal(s.locks.total, 2);
  const byPath = Object.fromEntries(s.locks.items.map((l: { path: string }) => [l.path, l]));
  t.equal(byPath['art/hero.psd'].owner, 'wendy');
  t.equal(byPath['art/hero.psd'].stale, true, 'old lock is stale');
  t.ok(byPath['art/hero.psd'].age_seconds >= 7199);
  t.equal(byPath['art/fresh.psd'].stale, false);
  t.equal(s.locks.max_age_seconds, 3600);
  t.equal(s.last_audit, null, 'never audited');

  const page = await http('GET', `${base}/${REPO}`, { headers: { authorization: basic('reader') } });
  t.equal(page.status, 200);
  t.match(page.headers['content-type'], /^text\/html/);
  t.match(page.headers['content-security-policy'], /default-src 'none'/);
  t.equal(page.headers['x-frame-options'], 'DENY');
  const html = page.body.toString('utf8');
  const f = fields(html);
  // The same numbers as the JSON.
  t.equal(Number(f.objects), s.objects);
  t.equal(Number(f.logical_bytes), s.logical_bytes);
  t.equal(Number(f.stored_bytes), s.stored_bytes);
  t.equal(Number(f.saved_bytes), s.saved_bytes);
  t.equal(Number(f.saving_ratio), s.saving_ratio);
  t.equal(Number(f.locks_total), s.locks.total);
  t.match(html, /<svg[^>]+aria-label="Objects by size"/, 'histogram plot');
  t.equal((html.match(/<rect class="c0" [^>]*><title>/g) ?? []).length, 13, 'one bar per bucket');
  t.match(html, blobs[4]!.oid.slice(0, 16), 'largest object listed');
  t.match(html, /art\/hero\.psd<\/code><\/td><td[^>]*>wendy<\/td><td[^>]*>2 h 0 min<\/td><td[^>]*><span class="badge stale">stale<\/span>/, 'stale lock marked with owner and age');
  t.match(html, /Never audited\./);
  t.notMatch(html, /<script/, 'the repository page needs no script');

  // A recorded audit result shows on both (the audit job writes this row).
  db.prepare('INSERT INTO repo_audits (repo, finished_at, objects, bytes, corrupt, unreadable, complete) VALUES (?, ?, ?, ?, ?, ?, ?)').run(REPO, Date.UTC(2026, 0, 2, 3, 4, 5), 5, logical, 1, 0, 1);
  const audited = (await http('GET', `${base}/${REPO}/objects/stats`, { headers: { authorization: basic('reader') } })).json();
  t.same(audited.last_audit, { finished_at: '2026-01-02T03:04:05.000Z', objects: 5, bytes: logical, corrupt: 1, unreadable: 0, complete: true, ok: false });
  const auditedPage = (await http('GET', `${base}/${REPO}`, { headers: { authorization: basic('reader') } })).body.toString();
  t.match(auditedPage, /problems found<\/span> Finished 2026-01-02 03:04:05 UTC: 5 objects/);

  // Pull is needed: no token → 401 with the Basic challenge (a browser asks for the token); no access → 404.
  const anon = await http('GET', `${base}/${REPO}`);
  t.equal(anon.status, 401);
  t.equal(anon.headers['www-authenticate'], 'Basic realm="Stowage"');
  t.equal((await http('GET', `${base}/${REPO}/objects/stats`, { headers: { authorization: basic('stranger') } })).status, 404);
  t.equal((await http('GET', `${base}/${REPO}`, { headers: { authorization: basic('nonsense') } })).status, 401);
  t.equal((await http('GET', `${base}/acme/..`, { headers: { authorization: basic('reader') } })).status, 404, 'bad name');
});

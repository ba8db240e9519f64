import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, batch, blobOf, http } from '../helpers/lfs-http.js';
import { startServer } from '../helpers/start-server.js';

// No answer an uploader can get tells whether another repository holds an oid. Two worlds that
// differ only in that: a victim repository holds the attacker's guessed 47-byte file, or another
// file of the same size. The attacker (its own token and repository) asks everything it may ask
// (batch, upload, stats, a retain dry run of its own repository, /metrics without the token) and
// must get the same answers in both. The server admin's token still sees the store-wide figures.
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('victim/secrets', { private: true });
forge.repos.set('evil/probe', { private: true });
forge.tokens.set('tok-victim', { login: 'vera', repos: { 'victim/secrets': 'push' } });
forge.tokens.set('tok-attacker', { login: 'mallory', repos: { 'evil/probe': 'push' } });

const METRICS_TOKEN = 'metrics-token-0123456789abcdef';
const guessed = blobOf(Buffer.from('salary of the CEO: 1234567 EUR, confidential!!!', 'latin1'));
const other = blobOf(Buffer.from('salary of the CFO: 7654321 EUR, confidential!!!', 'latin1'));
t.equal(guessed.size, 47, 'a 47-byte file');
t.equal(other.size, guessed.size, 'the other world holds a file of the same size');

/** The series an uploader could read off the store's own bookkeeping. */
const WATCHED = ['svc_store_objects', 'svc_store_stored_bytes', 'svc_store_logical_bytes', 'svc_journal_records_total', 'svc_journal_segments_total'];

function sampleOf(text: string, name: string): string | null {
  const lines = text.split('\n').filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return lines.length === 0 ? null : lines.join('\n');
}

/** Everything the attacker sees in a world where the victim holds `victimHolds`. */
async function world(victimHolds: typeof guessed): Promise<{ attacker: Record<string, unknown>; admin: Record<string, string | null> }> {
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_GC_GRACE: '0', SVC_METRICS_TOKEN: METRICS_TOKEN });
  try {
    const as = (tok: string): Record<string, string> => ({ authorization: basic(tok) });
    const put = await http('PUT', `${server.url}/victim/secrets/objects/${victimHolds.oid}`, { headers: as('tok-victim'), body: victimHolds.data });
    t.equal(put.status, 200, 'the victim stored its file');

    const strip = (text: string): string => text.replaceAll(server.url, 'BASE').replace(/"request_id":"[^"]*"/g, '"request_id":"-"');
    const seen: Record<string, unknown> = {};
    const up = await batch(server.url, 'evil/probe', 'tok-attacker', 'upload', [{ oid: guessed.oid, size: guessed.size }]);
    seen.batchUpload = [up.status, strip(up.body.toString())];
    const down = await batch(server.url, 'evil/probe', 'tok-attacker', 'download', [{ oid: guessed.oid, size: guessed.size }]);
    seen.batchDownload = [down.status, strip(down.body.toString())];
    const head = await http('HEAD', `${server.url}/evil/probe/objects/${guessed.oid}`, { headers: as('tok-attacker') });
    seen.head = head.status;

    const upload = await http('PUT', `${server.url}/evil/probe/objects/${guessed.oid}`, { headers: as('tok-attacker'), body: guessed.data });
    seen.upload = [upload.status, strip(upload.body.toString())];

    const stats = (await http('GET', `${server.url}/evil/probe/objects/stats`, { headers: as('tok-attacker') })).json();
    delete stats.generated_at;
    for (const o of stats.largest_objects) delete o.created_at;
    seen.stats = stats;

    const retain = await http('POST', `${server.url}/evil/probe/objects/retain`, {
      headers: { ...as('tok-attacker'), 'content-type': LFS },
      body: JSON.stringify({ oids: [], dry_run: true }),
    });
    seen.retainStatus = retain.status;
    const report = retain.json();
    delete report.job; // a random job id
    seen.retain = report;

    // Store figures are cached for a minute: this first scrape computes them after every upload above.
    const open = await http('GET', `${server.url}/metrics`);
    seen.metricsStatus = open.status;
    for (const name of WATCHED) seen[name] = sampleOf(open.body.toString(), name);
    // Disk free moves with anything on this disk: only whether the series is shown is compared.
    seen.diskFreeShown = sampleOf(open.body.toString(), 'svc_data_dir_free_bytes') !== null;

    const full = (await http('GET', `${server.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).body.toString();
    const admin = Object.fromEntries(['svc_store_objects', 'svc_store_stored_bytes', 'svc_data_dir_free_bytes'].map((n) => [n, sampleOf(full, n)]));
    const wrong = await http('GET', `${server.url}/metrics`, { headers: { authorization: 'Bearer not-the-metrics-token' } });
    t.equal(wrong.status, 401, 'a wrong metrics token: 401');
    t.match(wrong.headers['content-type'], /^application\/vnd\.git-lfs\+json/, 'with the LFS error body');
    t.match(wrong.body.toString(), /"message":"[^"]*SVC_METRICS_TOKEN/, 'naming SVC_METRICS_TOKEN');
    t.equal(wrong.headers['www-authenticate'], 'Bearer realm="Stowage metrics"');
    const attackerToken = await http('GET', `${server.url}/metrics`, { headers: as('tok-attacker') });
    t.equal(attackerToken.status, 401, 'a forge token is not the metrics token');
    return { attacker: seen, admin };
  } finally {
    await server.stop();
  }
}

t.test("an uploader's answers are the same whether or not another repository holds the oid", async (t) => {
  const held = await world(guessed);
  const notHeld = await world(other);
  t.same(held.attacker, notHeld.attacker, 'every answer the attacker gets is identical in both worlds');
  // The answers themselves: an upload is asked for, the object counts in full for this repository.
  t.match(held.attacker, {
    batchUpload: [200, /"actions":\{"upload"/],
    batchDownload: [200, /"code":404/],
    head: 404,
    upload: [200],
    stats: { objects: 1, logical_bytes: 47, stored_bytes: 47 },
    retainStatus: 200,
    retain: { swept: 1, bytes: 47, dry_run: true },
    metricsStatus: 200,
    diskFreeShown: false,
  });
  for (const name of ['svc_store_objects', 'svc_store_stored_bytes', 'svc_journal_segments_total']) t.equal(held.attacker[name], null, `${name} is not shown without the metrics token`);
  t.match(held.attacker.svc_store_logical_bytes, /^svc_store_logical_bytes 94$/, 'logical bytes (each reference counted) stay open: they move the same either way');

  // With the token, the admin sees the store as it is: one copy in one world, two in the other.
  t.equal(held.admin.svc_store_objects, 'svc_store_objects 1', 'admin: the store keeps one copy of a shared object');
  t.equal(notHeld.admin.svc_store_objects, 'svc_store_objects 2');
  t.equal(held.admin.svc_store_stored_bytes, 'svc_store_stored_bytes 47');
  t.ok(held.admin.svc_data_dir_free_bytes !== null, 'admin: disk free shown');
});

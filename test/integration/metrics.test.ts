import { spawnSync } from 'node:child_process';
import { readFileSync, statfsSync } from 'node:fs';
import t, { type Test } from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { textLike } from '../helpers/data.js';
import { LFS, basic, batch, blob, blobOf, http, push, type Blob } from '../helpers/lfs-http.js';
import { startServer } from '../helpers/start-server.js';
import { waitFor } from '../helpers/wait-for.js';

// GET /metrics (docs/metrics.md) against the real server after real traffic: every series present
// with the values the traffic implies, route labels only ever route names, and the whole exposition
// accepted by Prometheus' own linter (`promtool check metrics`, Debian package `prometheus`).
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok-writer', { login: 'wendy', repos: { 'acme/game': 'push' } });
forge.tokens.set('tok-reader', { login: 'rita', repos: { 'acme/game': 'pull' } });

const METRICS_TOKEN = 'metrics-test-token-0123456789';
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_MAX_OBJECT_SIZE: '64MiB', SVC_COMPRESSION: 'zstd', SVC_METRICS_TOKEN: METRICS_TOKEN });
/** The scrape as the operator's Prometheus makes it: with the metrics token, every series. */
const FULL = { headers: { authorization: `Bearer ${METRICS_TOKEN}` } };
t.teardown(() => server.stop());
const base = server.url;
const GAME = 'acme/game';
const PACKAGE_VERSION = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** Every route name the server registers: the only values a `route` label may take. */
const ROUTE_NAMES = new Set(
  'health ready metrics batch verify upload download lock_create lock_list lock_verify lock_unlock dashboard_redirect dashboard dashboard_jobs session_create session_show session_delete overview access_show access_save access_reset retain dedupe compress audit job repo_stats repo_page not_found'.split(' '),
);
/** The causes the README documents for svc_rejections_total. */
const DOCUMENTED_CAUSES = new Set(['lookup_budget_spent', 'forge_rate_limited', 'forge_unreachable', 'repo_not_allowed', 'anonymous_read_disabled', 'object_too_large', 'quota_exceeded']);

interface Sample {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly value: number;
}

/** The text exposition format's sample lines (label values here never hold quotes or commas). */
function parse(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m === null) throw new Error(`unparsable sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="([^"]*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** The value of the one sample of `name` whose labels include `labels`; undefined when absent. */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (hits.length > 1 && Object.keys(labels).length > 0) throw new Error(`${name} ${JSON.stringify(labels)} matches ${hits.length} samples`);
  return hits.length === 0 ? undefined : hits.reduce((a, s) => a + s.value, 0);
}

async function scrape(t: Test): Promise<{ text: string; samples: Sample[] }> {
  const res = await http('GET', `${base}/metrics`, FULL);
  t.equal(res.status, 200, '/metrics answers 200');
  t.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/, 'Prometheus text format');
  const text = res.body.toString('utf8');
  return { text, samples: parse(text) };
}

const download = async (t: Test, b: Blob, range?: string): Promise<number> => {
  const res = await http('GET', `${base}/${GAME}/objects/${b.oid}`, { headers: { authorization: basic('tok-reader'), ...(range ? { range } : {}) } });
  t.ok(res.status === 200 || res.status === 206, `download ${res.status}`);
  return res.body.length;
};

// --- traffic: uploads of several sizes (one streamed in many chunks), downloads, a range, a
// refused object, a lock, and a maintenance job.
// Random bytes, and one compressible object whose frames the transfer pool compresses (random
// frames are judged incompressible by their samples and never reach the pool).
const textBlob = blobOf(textLike(3 * 1024 * 1024));
const blobs = [blob(1000), blob(200_000), blob(3 * 1024 * 1024), ...Array.from({ length: 6 }, () => blob(4 * 1024 * 1024)), textBlob];
const uploaded = blobs.reduce((a, b) => a + b.size, 0);
const randomBytesUploaded = uploaded - textBlob.size;
let downloaded = 0;

t.test('traffic', async (t) => {
  for (const b of blobs) t.equal(await push(base, GAME, 'tok-writer', b), 200, `upload of ${b.size} bytes`);
  downloaded += await download(t, blobs[0]!);
  downloaded += await download(t, blobs[2]!);
  downloaded += await download(t, blobs[1]!, 'bytes=100-1099');
  t.equal(downloaded, 1000 + 3 * 1024 * 1024 + 1000, 'the client got what it asked for');
  const dl = await batch(base, GAME, 'tok-reader', 'download', blobs.slice(0, 2).map((b) => ({ oid: b.oid, size: b.size })));
  t.equal(dl.status, 200);
  const tooBig = await batch(base, GAME, 'tok-writer', 'upload', [{ oid: 'c'.repeat(64), size: 1024 ** 3 }]);
  t.equal(tooBig.json().objects[0].error.code, 422, 'an object over SVC_MAX_OBJECT_SIZE is refused');
  const lock = await http('POST', `${base}/${GAME}/locks`, {
    headers: { authorization: basic('tok-writer'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ path: 'assets/hero.psd', ref: { name: 'refs/heads/main' } }),
  });
  t.equal(lock.status, 201, 'a lock is taken');
});

t.test('a running job shows its progress by kind', async (t) => {
  // An audit needs push (docs/maintenance.md, "Who may run a job").
  const started = await http('POST', `${base}/${GAME}/objects/audit`, {
    headers: { authorization: basic('tok-writer'), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ wait: false }),
  });
  t.equal(started.status, 202, 'the audit runs in the background');
  const href = String(started.headers.location);
  // The job is short: look while it runs; the idle series are checked below in any case.
  let caught = false;
  for (let i = 0; i < 200 && !caught; i++) {
    const s = parse((await http('GET', `${base}/metrics`)).body.toString('utf8'));
    if (value(s, 'svc_maintenance_jobs', { kind: 'audit', state: 'running' }) === 1) {
      caught = true;
      const done = value(s, 'svc_maintenance_job_done_bytes', { kind: 'audit' })!;
      const planned = value(s, 'svc_maintenance_job_planned_bytes', { kind: 'audit' })!;
      t.ok(done >= 0 && (planned === 0 || done <= planned), `running audit: ${done} of ${planned} bytes`);
      t.ok(planned === 0 || planned === uploaded, 'planned bytes are the repository\'s bytes once counted');
    }
    const job = (await http('GET', `${base}${href}`, { headers: { authorization: basic('tok-reader'), accept: LFS } })).json();
    if (job.state !== 'queued' && job.state !== 'running') break;
  }
  if (!caught) t.comment('the audit finished between two scrapes; its running state was not seen');
  const ended = await waitFor(async () => {
    const job = (await http('GET', `${base}${href}`, { headers: { authorization: basic('tok-reader'), accept: LFS } })).json();
    return job.state !== 'queued' && job.state !== 'running' ? job : null;
  }, 'the audit to end');
  t.equal(ended.state, 'done', 'the audit does not fail');
  // The job gauges come from a cache of their own: wait until it shows every job at rest.
  const jobGauges = ['running', 'queued'].flatMap((state) => ['retain', 'dedupe', 'compress', 'audit'].map((kind) => ({ kind, state })));
  const { samples } = await waitFor(async () => {
    const scraped = await scrape(t);
    return jobGauges.every((labels) => value(scraped.samples, 'svc_maintenance_jobs', labels) === 0) ? scraped : null;
  }, 'the job gauges to show every job at rest');
  for (const kind of ['retain', 'dedupe', 'compress', 'audit']) {
    t.equal(value(samples, 'svc_maintenance_jobs', { kind, state: 'running' }), 0, `no ${kind} job running`);
    t.equal(value(samples, 'svc_maintenance_jobs', { kind, state: 'queued' }), 0, `no ${kind} job queued`);
    for (const name of ['svc_maintenance_job_done_objects', 'svc_maintenance_job_planned_objects', 'svc_maintenance_job_done_bytes', 'svc_maintenance_job_planned_bytes']) {
      t.equal(value(samples, name, { kind }), 0, `${name}{kind="${kind}"} at rest`);
    }
  }
  t.notOk(samples.some((s) => s.name.startsWith('svc_maintenance_') && 'repository' in s.labels), 'jobs are never labelled by repository');
});

t.test('every series is there with the values the traffic implies', async (t) => {
  const { text, samples } = await scrape(t);
  // Bytes counted as they streamed equal the bytes moved.
  t.equal(value(samples, 'svc_transfer_bytes_total', { direction: 'upload' }), uploaded, 'uploaded bytes');
  t.equal(value(samples, 'svc_transfer_bytes_total', { direction: 'download' }), downloaded, 'downloaded bytes, the range included');
  t.equal(value(samples, 'svc_transfer_completed_bytes_total', { direction: 'upload' }), uploaded);
  t.equal(value(samples, 'svc_transfer_completed_bytes_total', { direction: 'download' }), downloaded);
  t.equal(value(samples, 'svc_transfers_total', { direction: 'upload', outcome: 'ok' }), blobs.length);

  // Requests and their durations, by route name and status.
  t.equal(value(samples, 'svc_requests_total', { route: 'upload', status: '200' }), blobs.length);
  t.equal(value(samples, 'svc_requests_total', { route: 'download', status: '206' }), 1);
  t.equal(value(samples, 'svc_requests_total', { route: 'lock_create', status: '201' }), 1);
  t.equal(value(samples, 'svc_request_duration_seconds_count', { route: 'upload', status: '200' }), blobs.length, 'one duration per upload');
  t.equal(value(samples, 'svc_request_duration_seconds_bucket', { route: 'upload', status: '200', le: '+Inf' }), blobs.length);
  t.ok(value(samples, 'svc_request_duration_seconds_sum', { route: 'upload', status: '200' })! > 0, 'uploads took some time');
  t.ok(value(samples, 'svc_request_duration_seconds_count', { route: 'batch', status: '200' })! >= blobs.length + 2, 'batches timed');
  const routes = new Set(samples.filter((s) => 'route' in s.labels).map((s) => s.labels.route!));
  t.ok(routes.size >= 6, `routes seen: ${[...routes].join(', ')}`);
  for (const r of routes) t.ok(ROUTE_NAMES.has(r), `route label "${r}" is a route name`);
  t.notOk(/[0-9a-f]{64}/.test(text), 'no oid anywhere in the exposition');
  t.notOk(text.includes('acme'), 'no repository anywhere in the exposition');

  // Refusals by cause, each documented.
  t.equal(value(samples, 'svc_rejections_total', { cause: 'object_too_large' }), 1, 'the over-size object');
  for (const s of samples.filter((s) => s.name === 'svc_rejections_total')) t.ok(DOCUMENTED_CAUSES.has(s.labels.cause!), `cause ${s.labels.cause} is documented`);

  // Forge and caches: one lookup per token and repository, answered from cache afterwards.
  t.equal(value(samples, 'svc_forge_lookups_total', { result: 'granted' }), 2, 'writer and reader looked up once each');
  t.equal(value(samples, 'svc_auth_cache_misses_total', { kind: 'access' }), 2, 'the two lookups were misses');
  t.ok(value(samples, 'svc_auth_cache_hits_total', { kind: 'granted' })! >= blobs.length, 'later requests hit the cache');
  t.equal(value(samples, 'svc_auth_cache_misses_total', { kind: 'identity' }), 1, 'the lock asked who the writer is');

  // Store and lock gauges from SQLite.
  t.equal(value(samples, 'svc_store_objects'), blobs.length);
  t.equal(value(samples, 'svc_store_logical_bytes'), uploaded);
  const stored = value(samples, 'svc_store_stored_bytes')!;
  t.ok(stored > randomBytesUploaded && stored < randomBytesUploaded + textBlob.size / 2, `random bytes stored as they came, the text compressed (${stored} of ${uploaded})`);
  t.equal(value(samples, 'svc_locks_held'), 1, 'the lock');

  // Worker pools: both of them, with a sane load.
  for (const pool of ['transfer', 'maintenance']) {
    t.ok(value(samples, 'svc_worker_pool_threads', { pool })! >= 1, `${pool} pool threads`);
    const u = value(samples, 'svc_worker_pool_utilization_ratio', { pool })!;
    t.ok(u >= 0 && u <= 1, `${pool} utilization ${u} in 0..1`);
    t.ok(value(samples, 'svc_worker_pool_queued_tasks', { pool })! >= 0, `${pool} queue`);
    t.ok(value(samples, 'svc_worker_pool_busy_seconds_total', { pool })! > 0, `${pool} pool did work (uploads compress frames; the audit hashes)`);
  }

  // Default process metrics under their standard names (stock Node.js dashboards query these),
  // minus the three gauges named *_total that the lint refuses.
  t.ok(value(samples, 'process_cpu_seconds_total')! > 0, 'process metrics included');
  t.ok(value(samples, 'process_resident_memory_bytes')! > 0);
  t.ok(value(samples, 'nodejs_heap_size_used_bytes')! > 0);
  t.ok(value(samples, 'nodejs_active_handles') !== undefined);
  t.equal(value(samples, 'nodejs_active_handles_total'), undefined);
  t.notOk(samples.some((s) => s.name.startsWith('svc_process_')), 'no prefixed copies');

  // Build, readiness and disk: one build_info sample, the data dir's file system as statfs sees it.
  const build = samples.filter((s) => s.name === 'stowage_build_info');
  t.equal(build.length, 1, 'one build_info series');
  t.same(build[0], { name: 'stowage_build_info', labels: { version: PACKAGE_VERSION }, value: 1 }, 'the version of package.json');
  t.equal(value(samples, 'svc_ready'), 1, 'the store takes writes');
  const fs = statfsSync(server.dataDir);
  const free = value(samples, 'svc_data_dir_free_bytes')!;
  t.equal(value(samples, 'svc_data_dir_size_bytes'), fs.blocks * fs.bsize, 'size of the data dir\'s file system');
  // Other helpers write to the same disk between the scrape and this statfs: compare loosely.
  t.ok(free > 0 && Math.abs(free - fs.bavail * fs.bsize) < 1024 ** 3, `free bytes ${free} near statfs ${fs.bavail * fs.bsize}`);

  // Each series has HELP and TYPE.
  for (const name of new Set(samples.map((s) => s.name.replace(/_(bucket|sum|count)$/, '')))) {
    if (!text.includes(`# HELP ${name} `) && !text.includes(`# HELP ${name.replace(/_(bucket|sum|count)$/, '')} `)) t.fail(`no HELP for ${name}`);
  }

  // Prometheus' own linter accepts the exposition.
  const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if ((lint.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    t.fail('promtool is not installed: apt-get install -y --no-install-recommends prometheus (Debian ships promtool in the prometheus package)');
  } else {
    t.equal(lint.status, 0, `promtool check metrics passes${lint.stdout || lint.stderr ? `: ${lint.stdout}${lint.stderr}` : ''}`);
  }
});

t.test('without the metrics token: every series but the store-wide ones; a wrong token is refused', async (t) => {
  const full = (await scrape(t)).samples;
  const res = await http('GET', `${base}/metrics`);
  t.equal(res.status, 200, 'open to all');
  const text = res.body.toString('utf8');
  const open = parse(text);
  // They would tell an uploader whether another repository holds an oid (docs/metrics.md).
  const storeWide = ['svc_store_objects', 'svc_store_stored_bytes', 'svc_data_dir_free_bytes', 'svc_journal_segments_total'];
  for (const name of storeWide) {
    t.ok(full.some((s) => s.name === name), `${name} with the token`);
    t.notOk(open.some((s) => s.name === name) || text.includes(`# HELP ${name} `), `${name} left out without it`);
  }
  const names = (samples: Sample[]): Set<string> => new Set(samples.map((s) => s.name));
  t.same([...names(full)].filter((n) => !names(open).has(n)).sort(), [...storeWide].sort(), 'nothing else is left out');
  const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (lint.error === undefined) t.equal(lint.status, 0, `promtool check metrics passes on the open exposition${lint.stdout || lint.stderr ? `: ${lint.stdout}${lint.stderr}` : ''}`);
  for (const authorization of ['Bearer wrong-token', basic('tok-reader'), `Bearer ${METRICS_TOKEN}x`]) {
    const refused = await http('GET', `${base}/metrics`, { headers: { authorization } });
    t.equal(refused.status, 401, `${authorization.slice(0, 12)}…: 401`);
    t.match(refused.json(), { message: /SVC_METRICS_TOKEN/ });
  }
});

t.test('store figures are computed at most once a minute; byte counters are live', async (t) => {
  const before = (await scrape(t)).samples;
  const extra = blob(50_000);
  t.equal(await push(base, GAME, 'tok-writer', extra), 200);
  const after = (await scrape(t)).samples;
  t.equal(value(after, 'svc_store_objects'), value(before, 'svc_store_objects'), 'objects gauge still the cached figure');
  t.equal(value(after, 'svc_store_logical_bytes'), value(before, 'svc_store_logical_bytes'), 'logical bytes still cached');
  t.equal(
    value(after, 'svc_transfer_bytes_total', { direction: 'upload' }),
    value(before, 'svc_transfer_bytes_total', { direction: 'upload' })! + extra.size,
    'the upload counted at once',
  );
  // Concurrent scrapes share one refresh and agree.
  const many = await Promise.all(Array.from({ length: 5 }, () => http('GET', `${base}/metrics`, FULL)));
  const objects = many.map((r) => value(parse(r.body.toString('utf8')), 'svc_store_objects'));
  t.same(new Set(objects).size, 1, 'concurrent scrapes see one figure');
});

import { fileURLToPath } from 'node:url';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { batch, blob, http } from '../helpers/lfs-http.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

// A server at rest loads only what serving needs at once (native-bench/NOTES.md, Memory): the
// forge's HTTP client (node:http; undici only ever for a bucket), the metrics library (prom-client),
// the worker pools' library (piscina) and the native codecs (zstd, BLAKE3) wait for their first
// use, and what they then serve is what they served when loaded at start.
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok-writer', { login: 'wendy', repos: { 'acme/game': 'push' } });

const preload = fileURLToPath(new URL('../fixtures/loaded-packages.preload.js', import.meta.url));
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, NODE_OPTIONS: `--import=${preload}` });
t.teardown(() => server.stop());

/** The packages the server process has loaded now (its preload answers SIGUSR2 with a log line). */
async function loaded(s: RunningServer): Promise<string[]> {
  const from = s.logs.length;
  s.child.kill('SIGUSR2');
  const ev = await s.waitForLog((e) => e.msg === 'loaded packages', 'the list of loaded packages', from);
  return ev.packages as string[];
}

t.test('just started: the index and HTTP server loaded; forge client, metrics, pools and codecs not', async (t) => {
  const packages = await loaded(server);
  for (const needed of ['better-sqlite3', '@trufflesuite/uws-js-unofficial']) t.ok(packages.includes(needed), `${needed} is loaded (the probe sees packages)`);
  for (const lazy of ['undici', 'prom-client', 'piscina', 'zstd-napi', '@napi-rs/blake-hash']) t.notOk(packages.includes(lazy), `${lazy} is not loaded yet`);
});

t.test('the first scrape loads the metrics and shows the requests before it', async (t) => {
  t.equal((await http('GET', `${server.url}/health`)).status, 200);
  const res = await http('GET', `${server.url}/metrics`);
  t.equal(res.status, 200);
  const text = res.body.toString('utf8');
  t.match(text, /^svc_requests_total\{route="health",status="200"\} 1$/m, 'the /health answered before the scrape is counted');
  t.match(text, /^svc_transfer_bytes_total\{direction="upload"\} 0$/m, 'zero series exist from the start');
  t.match(text, /^stowage_build_info\{version="[^"]+"\} 1$/m);
  t.match(text, /^process_cpu_seconds_total \d/m, 'the default Node.js series are there');
  t.ok((await loaded(server)).includes('prom-client'));
});

t.test('a forge lookup never loads undici: the forge client is node:http (the bucket\'s client alone uses undici)', async (t) => {
  t.notOk((await loaded(server)).includes('undici'), 'not before');
  const { oid, size } = blob(1024);
  const res = await batch(server.url, 'acme/game', 'tok-writer', 'upload', [{ oid, size }]);
  t.equal(res.status, 200, 'granted through the forge');
  t.ok(forge.requests.length > 0, 'the forge was asked');
  t.notOk((await loaded(server)).includes('undici'), 'nor after the lookup');
});

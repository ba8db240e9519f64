import t, { type Test } from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';
import { fuzzForge, runCases } from './fuzz-cases.js';

// Generated requests over raw sockets: every route shape, every method, random headers, bodies,
// framing, paths and encodings. Whatever comes, the server answers with a well-formed response of
// its own (never a 5xx but a 503 with Retry-After, errors in the Git LFS body) or, for what uWS
// refuses on its own (docs/http.md), closes without a byte; and it is alive at the end. Seeded:
// a failure prints its case number and the request, and the same seed replays it.
const SEED = Number(process.env.FUZZ_SEED ?? 20240611);
const PER_SERVER = 1500;
const CONCURRENCY = 8;

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
fuzzForge(forge);

async function fuzz(t: Test, server: RunningServer, seed: number): Promise<void> {
  const { failures, answered } = await runCases({
    seed,
    count: PER_SERVER,
    concurrency: CONCURRENCY,
    // A request uWS may hold open (a lying Content-Length) is ended by our FIN instead of a clock.
    send: (c) => rawRequest(server.port, c.bytes, { head: c.head, halfClose: c.mayBeRefused }),
  });
  t.same(failures.slice(0, 20), [], `${PER_SERVER} requests, each answered well (or refused by uWS); ${failures.length} bad`);
  t.ok(answered > PER_SERVER * 0.8, `most requests answered (${answered} of ${PER_SERVER})`);
  t.equal(server.child.exitCode, null, 'the server process is alive');
  const health = await rawRequest(server.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(health.responses[0]?.status, 200, '/health answers at the end');
  t.notMatch(server.logs.join('\n'), /uncaught|unhandled/i, 'nothing uncaught or unhandled in the log');
}

t.test('request log on, compression on', async (t) => {
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: 'true', SVC_COMPRESSION: 'zstd:1' });
  t.teardown(() => server.stop());
  await fuzz(t, server, SEED);
  t.equal(await server.stop(), 0, 'clean stop');
});

t.test('request log off, compression off', async (t) => {
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: 'false' });
  t.teardown(() => server.stop());
  await fuzz(t, server, SEED + 1);
  t.equal(await server.stop(), 0, 'clean stop');
});

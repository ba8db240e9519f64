import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import t, { type Test } from 'tap';
import { startCluster } from '../helpers/cluster.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { freePort, hasNginx, parseAccessLine, selfSignedCert, startNginx, templateConf } from '../helpers/nginx.js';
import { blob, push } from '../helpers/lfs-http.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { rawRequest, type RawResponse, type RawResult } from '../helpers/raw-http.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';
import { fuzzForge, problemOf, runCases, type Case } from '../security/fuzz-cases.js';

// The fuzz's generated requests (test/security/fuzz-cases.ts) in the configurations operators run,
// request logging and compression on: one node behind nginx with the shipped
// deploy/nginx/stowage.conf (TLS), and two cluster nodes sharing PostgreSQL and the bucket. What
// test/security/fuzz.test.ts asks of a lone node holds here too: every answer well-formed, no 5xx
// but a 503 with Retry-After, errors in the Git LFS body, every process alive at the end. Behind
// nginx, what nginx refuses itself (its own error page) is accepted only where nginx documents the
// refusal for that input; a 502 or 504, nginx failing to get an answer from the node, never is.
const SEED = Number(process.env.FUZZ_SEED ?? 20240917);
const PER_CONFIGURATION = 400;
const CONCURRENCY = 8;

if (!hasNginx() || !hasPostgres()) {
  t.fail(hasNginx() ? POSTGRES_INSTALL_HINT : 'nginx is not installed: apt-get install -y nginx-light (.ci/run does)');
  t.end();
} else {
  const pg = await startPostgres((fn) => t.teardown(fn));
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  fuzzForge(forge);
  const operators = { SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: 'true', SVC_COMPRESSION: 'zstd:1' };

  /** What a node must show after the run: alive, healthy, nothing uncaught. */
  const assertAlive = async (t: Test, server: RunningServer, name: string): Promise<void> => {
    t.equal(server.child.exitCode, null, `${name}: the process is alive`);
    const health = await rawRequest(server.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    t.equal(health.responses[0]?.status, 200, `${name}: /health answers at the end`);
    t.notMatch(server.logs.join('\n'), /uncaught|unhandled/i, `${name}: nothing uncaught or unhandled in the log`);
  };

  /** nginx's own error page (the node's errors are Git LFS JSON; nginx hides the node's Server header, so the body tells). */
  const fromNginx = (c: Case, res: RawResponse): boolean =>
    /^text\/html/.test(res.headers['content-type'] ?? '') && (c.head || res.body.toString('latin1').includes('<center>nginx'));

  /**
   * nginx's own refusals of a request it cannot pass on (ngx_http_parse.c, ngx_http_request.c):
   * 400 for a malformed request line, header or chunked body, or Content-Length together with
   * Transfer-Encoding; 414/494 for a request line or header past large_client_header_buffers; 501
   * for a Transfer-Encoding other than chunked ("client sent unknown Transfer-Encoding").
   */
  const nginxRefusal = (c: Case, res: RawResponse): boolean => {
    if ([400, 414, 494].includes(res.status)) return true;
    const te = /\r\nTransfer-Encoding: ([^\r]*)\r\n/i.exec(c.bytes.slice(0, c.bytes.indexOf('\r\n\r\n') + 2))?.[1];
    return res.status === 501 && te !== undefined && te.toLowerCase() !== 'chunked';
  };

  /**
   * A HEAD, then (once its answer is in) a GET /health on the same connection: the statuses that came
   * back, in order. nginx keeps its connections to a node open and sends the next request of any
   * client on one: a connection a HEAD answer leaves unusable fails someone else's request.
   */
  const headThenHealth = (port: number, head: string): Promise<number[]> =>
    new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1');
      let buf = '';
      let second = false;
      const statuses = (): number[] => [...buf.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => Number(m[1]));
      s.on('data', (d: Buffer) => {
        buf += d.toString('latin1');
        if (!second && buf.includes('\r\n\r\n')) {
          second = true;
          s.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
        } else if (second && statuses().length >= 2 && buf.endsWith('}')) s.destroy();
      });
      s.on('close', () => resolve(statuses()));
      s.on('error', (e: NodeJS.ErrnoException) => (e.code === 'ECONNRESET' ? undefined : reject(e)));
      s.write(`${head} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    });

  t.test('a HEAD answer leaves its connection usable for the next request', async (t) => {
    const server = await startServer(operators);
    t.teardown(() => server.stop());
    const b = blob(1000);
    t.equal(await push(server.url, 'acme/open', 'tok-writer', b), 200, 'an object to HEAD');
    // A download's HEAD (sendHead) and a refusal's (send): the two ways a HEAD is answered.
    for (const head of [`HEAD /acme/open/objects/${b.oid}`, `HEAD /acme/open/objects/${'e'.repeat(64)}`, 'HEAD /ready']) {
      const statuses = await headThenHealth(server.port, head);
      t.equal(statuses.length, 2, `${head}, then GET /health on the same connection: two answers (${statuses.join(', ')})`);
      t.equal(statuses[1], 200, 'the GET after the HEAD answered 200');
    }
  });

  t.test('behind nginx with the shipped configuration (TLS)', async (t) => {
    const ports = { https: await freePort(), http: await freePort() };
    const server = await startServer({ ...operators, SVC_BASE_URL: `https://127.0.0.1:${ports.https}` });
    t.teardown(() => server.stop());
    const { cert, key } = selfSignedCert(tmpDir('stowage-fuzz-nginx-'));
    const nginx = await startNginx(tmpDir('stowage-fuzz-nginx-prefix-'), templateConf({ ...ports, upstreams: [server.port] }, cert, key), ports.https);
    t.teardown(() => nginx.stop());
    const ca = readFileSync(cert);

    const refusedByNginx = new Map<number, number>();
    const { failures, answered } = await runCases({
      seed: SEED,
      count: PER_CONFIGURATION,
      concurrency: CONCURRENCY,
      send: (c) => rawRequest(ports.https, c.bytes, { head: c.head, halfClose: c.mayBeRefused, tls: { ca } }),
      judge: (c: Case, r: RawResult) => {
        const res = r.responses[0];
        if (res === undefined || !fromNginx(c, res)) return problemOf(c, r);
        if (!nginxRefusal(c, res)) return `nginx itself answered ${res.status}`;
        refusedByNginx.set(res.status, (refusedByNginx.get(res.status) ?? 0) + 1);
        return null;
      },
    });
    t.comment(`refused by nginx itself: ${JSON.stringify(Object.fromEntries(refusedByNginx))}`);
    t.same(failures.slice(0, 20), [], `${PER_CONFIGURATION} requests through nginx, each answered well; ${failures.length} bad`);
    t.ok(answered > PER_CONFIGURATION * 0.8, `most requests answered (${answered} of ${PER_CONFIGURATION})`);

    // What nginx passed to the node and could not get an answer for: a 502/504 with an upstream.
    const log = readFileSync(nginx.accessLog, 'utf8').split('\n').map(parseAccessLine).filter((l) => l !== null);
    const failedUpstream = log.filter((l) => l.upstreams.length > 0 && (l.status === 502 || l.status === 504));
    t.same(failedUpstream.map((l) => `${l.method} ${l.path.slice(0, 120)} ${l.status}`), [], 'nginx got an answer from the node for every request it passed on');
    t.ok(log.filter((l) => l.upstreams.length > 0).length > PER_CONFIGURATION / 2, 'most requests reached the node');
    t.notMatch(readFileSync(nginx.errorLog, 'utf8'), /\[(crit|alert|emerg)\]/, 'nginx logged nothing critical');
    await assertAlive(t, server, 'the node');
    t.equal(nginx.child.exitCode, null, 'nginx is alive');
    t.equal(await server.stop(), 0, 'clean stop');
  });

  t.test('two cluster nodes sharing PostgreSQL and the bucket', async (t) => {
    const s3 = await startS3Server(tmpDir('stowage-fuzz-cluster-s3-'));
    t.teardown(() => s3.stop());
    const cluster = await startCluster(t, { nodes: 2, s3, databaseUrl: await pg.createDatabase(), env: operators });
    const { failures, answered } = await runCases({
      seed: SEED + 1,
      count: PER_CONFIGURATION,
      concurrency: CONCURRENCY,
      // Each node in turn, straight to its port: what reaches a node past the proxy.
      send: (c, n) => rawRequest(cluster.ports[n % 2]!, c.bytes, { head: c.head, halfClose: c.mayBeRefused }),
    });
    t.same(failures.slice(0, 20), [], `${PER_CONFIGURATION} requests over two nodes, each answered well; ${failures.length} bad`);
    t.ok(answered > PER_CONFIGURATION * 0.8, `most requests answered (${answered} of ${PER_CONFIGURATION})`);
    for (const i of [0, 1]) await assertAlive(t, cluster.node(i), `node ${i}`);
  });
}

import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { Agent } from 'undici';
import { startCluster } from '../helpers/cluster.js';
import { pushableGame } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, LFS, type Blob, type Reply } from '../helpers/lfs-http.js';
import { hasNginx } from '../helpers/nginx.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { startS3Server } from '../helpers/s3-server.js';
import { tmpDir } from '../helpers/start-server.js';
import { capped, waitFor } from '../helpers/wait-for.js';

// Two nodes on one PostgreSQL index and one bucket (the S3 test server), behind nginx with the
// shipped configuration. A bucket answering 503 to everything: every request that needs it is
// answered 503 + Retry-After with the Git LFS body while it lasts, and served again once it stops,
// with nothing acknowledged lost. A node SIGKILLed while PUT bodies stream to it: those uploads fail
// at the client, the client's retry completes on the other node, every acknowledged object is
// intact, and the killed node, restarted, serves them all.

if (!hasNginx() || !hasPostgres()) {
  t.fail(hasNginx() ? POSTGRES_INSTALL_HINT : 'nginx is not installed: apt-get install -y nginx-light (.ci/run does)');
  t.end();
} else {
  const pg = await startPostgres((fn) => t.teardown(fn));
  const { env } = await pushableGame(t);
  const auth = { authorization: basic('tok') };
  const s3 = await startS3Server(tmpDir('stowage-cluster-faults-s3-'));
  t.teardown(() => s3.stop());
  const cluster = await startCluster(t, { nodes: 2, s3, databaseUrl: await pg.createDatabase(), env });
  const tls = new Agent({ connect: { ca: readFileSync(cluster.cert) }, connections: 16 });
  t.teardown(() => tls.close());
  /** Every object a node acknowledged (200 to its PUT). */
  const acknowledged: Blob[] = [];

  /** `request`, with the time it took as a comment (and in `waits`); rejects if still unanswered at the test's cap. */
  const answered = async <T>(t: Test, what: string, request: Promise<T>, waits?: number[]): Promise<T> => {
    const started = Date.now();
    const r = await capped(request, `an answer to ${what}`);
    const s = (Date.now() - started) / 1000;
    waits?.push(s);
    t.comment(`${what}: answered after ${s.toFixed(1)} s`);
    return r;
  };

  /** The upload action of `b` on node `i` (asked while everything answers), as a function sending the PUT. */
  const uploadAction = async (i: number, b: Blob): Promise<(body?: Buffer | AsyncIterable<Buffer>, dispatcher?: Agent) => Promise<Reply>> => {
    const answer = await batch(cluster.nodeUrl(i), 'acme/game', 'tok', 'upload', [{ oid: b.oid, size: b.size }]);
    const action = answer.json().objects[0].actions.upload;
    const href = dispatcherless(action.href, i);
    return (body = b.data, dispatcher) =>
      http('PUT', dispatcher === undefined ? href : action.href, { headers: { ...auth, 'content-type': 'application/octet-stream', ...(action.header ?? {}) }, body, dispatcher });
  };
  /** An action's href (at nginx, SVC_BASE_URL) sent straight to node `i` instead. */
  const dispatcherless = (href: string, i: number): string => `${cluster.nodeUrl(i)}${new URL(href).pathname}`;

  /** A batch and a PUT straight to node `i` (the batch's links point at nginx): the PUT's status. */
  const push = async (i: number, b: Blob): Promise<number> => (await (await uploadAction(i, b))()).status;

  const download = (base: string, b: Blob, dispatcher?: Agent): Promise<Reply> => http('GET', `${base}/acme/game/objects/${b.oid}`, { headers: auth, dispatcher });

  /** Every acknowledged object downloads whole from `base`. */
  const allIntact = async (t: Test, base: string, what: string, dispatcher?: Agent): Promise<void> => {
    let intact = 0;
    for (const b of acknowledged) {
      const res = await download(base, b, dispatcher);
      if (res.status === 200 && res.body.equals(b.data)) intact++;
    }
    t.equal(intact, acknowledged.length, `${what}: every acknowledged object intact (${intact} of ${acknowledged.length})`);
  };

  t.before(async () => {
    for (const i of [0, 1]) {
      const b = blob(64 << 10);
      if ((await push(i, b)) !== 200) throw new Error('the upload before any fault failed');
      acknowledged.push(b);
    }
  });

  t.test('the bucket answering 503: every request that needs it answered 503 + Retry-After; served again after', async (t) => {
    const puts = await Promise.all([0, 1].map((i) => uploadAction(i, blob(32 << 10))));
    s3.unavailable(true);
    t.teardown(() => s3.unavailable(false));
    const waits: number[] = [];
    const known = acknowledged[0]!;
    const requests = [0, 1].flatMap((i) => [
      [`node ${i}: PUT`, puts[i]!()],
      [`node ${i}: GET`, download(cluster.nodeUrl(i), known)],
      [`node ${i}: /ready`, http('GET', `${cluster.nodeUrl(i)}/ready`)],
    ] as const);
    const replies = await Promise.all(requests.map(([name, r]) => answered(t, name, r, waits)));
    for (const [n, res] of replies.entries()) {
      const name = requests[n]![0];
      t.equal(res.status, 503, `${name}: 503`);
      // /ready is a probe's question, not a client's request: its 503 is the answer (as in silent-database).
      if (name.endsWith('/ready')) continue;
      t.ok(Number(res.headers['retry-after']) > 0, `${name}: with Retry-After`);
      t.type(res.json().message, 'string', `${name}: the Git LFS error body`);
    }
    const unavailable = replies.filter((r) => r.status === 503).length;
    // What needs only the index goes on: the batch and locks.
    for (const i of [0, 1]) {
      const res = await answered(t, `node ${i}: lock`, http('POST', `${cluster.nodeUrl(i)}/acme/game/locks`, { headers: { ...auth, 'content-type': LFS, accept: LFS }, body: JSON.stringify({ path: `assets/bucket-503-${i}.bin` }) }), waits);
      t.equal(res.status, 201, `node ${i}: a lock is taken while the bucket answers 503`);
    }
    t.comment(`bucket answering 503: ${unavailable} requests answered 503, the longest wait ${Math.max(...waits).toFixed(1)} s`);

    s3.unavailable(false);
    for (const i of [0, 1]) {
      const put = await answered(t, `node ${i}: the PUT again`, puts[i]!());
      t.equal(put.status, 200, `node ${i}: the upload goes through once the bucket answers`);
      const b = blob(16 << 10);
      t.equal(await push(i, b), 200, `node ${i}: a new batch + PUT goes through, without a restart`);
      acknowledged.push(b);
      t.equal((await http('GET', `${cluster.nodeUrl(i)}/ready`)).status, 200, `node ${i}: ready again`);
    }
    for (const i of [0, 1]) await allIntact(t, cluster.nodeUrl(i), `node ${i} after the 503s`);
  });

  t.test('a node SIGKILLed while PUT bodies stream to it: the retry completes on the other node', async (t) => {
    t.teardown(async () => {
      if (!cluster.running(0)) await cluster.restart(0);
    });
    const blobs = Array.from({ length: 4 }, (_, i) => blob((4 << 20) + i));
    const actions = await Promise.all(blobs.map((b) => uploadAction(1, b)));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const held = (b: Blob) =>
      async function* (): AsyncIterable<Buffer> {
        yield b.data.subarray(0, 1 << 20);
        await released;
        yield b.data.subarray(1 << 20);
      };
    // Through nginx, round robin: two uploads to each node, each held after its first MiB.
    const uploads = blobs.map((b, n) =>
      actions[n]!(held(b)(), tls).then(
        (r) => r.status,
        () => 0, // the connection cut: what a client sees of its node dying
      ),
    );
    const inFlight = async (i: number): Promise<number> =>
      Number(/^svc_transfers_in_flight\{direction="upload"\} (\d+)/m.exec((await http('GET', `${cluster.nodeUrl(i)}/metrics`)).body.toString('utf8'))?.[1] ?? 0);
    // The event: all four bodies are streaming, some of them into node 0.
    await waitFor(async () => (await inFlight(0)) + (await inFlight(1)) === blobs.length && (await inFlight(0)) > 0, 'the four uploads streaming, some into node 0');
    t.comment(`node 0 receiving ${await inFlight(0)} uploads, node 1 ${await inFlight(1)}, when node 0 is killed`);
    await cluster.kill(0);
    release();
    const first = await Promise.all(uploads);
    t.comment(`first attempts answered ${first.join(', ')} (0: connection cut)`);
    t.ok(first.some((s) => s !== 200), 'the uploads node 0 was receiving failed at the client');
    t.ok(first.every((s) => s === 200 || s === 502 || s === 0), 'each failed as a proxy error or a cut connection, nothing else');

    // The client's retry, as git-lfs does it: batch again, then PUT what the batch still asks for.
    const waits: number[] = [];
    for (const [n, b] of blobs.entries()) {
      if (first[n] === 200) {
        acknowledged.push(b);
        continue;
      }
      const answer = await answered(t, `the retry's batch for upload ${n}`, http('POST', `${cluster.url}/acme/game/objects/batch`, {
        headers: { ...auth, 'content-type': LFS, accept: LFS },
        body: JSON.stringify({ operation: 'upload', objects: [{ oid: b.oid, size: b.size }], transfers: ['basic'] }),
        dispatcher: tls,
      }), waits);
      t.equal(answer.status, 200, `upload ${n}: the retry's batch answers`);
      const action = answer.json().objects[0].actions?.upload;
      if (action !== undefined) {
        const put = await answered(t, `the retry's PUT of upload ${n}`, http('PUT', action.href, { headers: { ...auth, 'content-type': 'application/octet-stream', ...(action.header ?? {}) }, body: b.data, dispatcher: tls }), waits);
        t.equal(put.status, 200, `upload ${n}: the retry's PUT completes`);
      }
      acknowledged.push(b);
    }
    const retried = cluster.accessLog().filter((l) => l.method === 'PUT' && l.status === 200 && blobs.some((b, n) => first[n] !== 200 && l.path.endsWith(b.oid)));
    t.ok(retried.every((l) => cluster.nodeOfPort(l.upstreams.at(-1)!) === 1), 'the retries were served by node 1');
    t.comment(`node killed mid-push: longest wait of a retry ${Math.max(0, ...waits).toFixed(1)} s`);

    await allIntact(t, cluster.nodeUrl(1), 'node 1, with node 0 down');
    await allIntact(t, cluster.url, 'through nginx, with node 0 down', tls);
    await cluster.restart(0);
    await allIntact(t, cluster.nodeUrl(0), 'node 0 restarted');
    const b = blob(16 << 10);
    t.equal(await push(0, b), 200, 'the restarted node takes uploads again');
    acknowledged.push(b);
    t.equal((await http('GET', `${cluster.nodeUrl(0)}/ready`)).status, 200, 'and is ready');
  });
}

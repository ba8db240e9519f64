import t, { type Test } from 'tap';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { pushableGame } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, LFS, push, type Blob, type Reply } from '../helpers/lfs-http.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';
import { capped, waitFor } from '../helpers/wait-for.js';

// Two nodes sharing one PostgreSQL index, reached through a TCP proxy that can go silent (accept and
// never answer: a partition), reset every connection, or be pointed at another address (a
// failover). Whatever the database does, every request that needs the index is answered: 503 with
// Retry-After and the Git LFS body while it cannot be reached (within the index deadline,
// SVC_INDEX_DEADLINE, set low here), /ready false, /health still up; and once it answers again the
// nodes serve again without a restart, with nothing they acknowledged lost.

if (!hasPostgres()) {
  t.fail(POSTGRES_INSTALL_HINT);
  t.end();
} else {
  const pg = await startPostgres((fn) => t.teardown(fn));
  const { env } = await pushableGame(t);
  const auth = { authorization: basic('tok') };
  const s3 = await startS3Server(tmpDir('stowage-silent-db-s3-'));
  t.teardown(() => s3.stop());
  const direct = new URL(await pg.createDatabase());
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: pg.port });
  t.teardown(() => proxy.close());
  // The same server at a second address: what a failover moves the proxy to.
  const standby = await startFaultProxy({ host: '127.0.0.1', port: pg.port });
  t.teardown(() => standby.close());
  const viaProxy = new URL(direct);
  viaProxy.port = String(proxy.port);

  const nodes: RunningServer[] = [];
  for (let i = 0; i < 2; i++) {
    const server = await startServer({ ...env, ...s3.env(), SVC_DATABASE_URL: viaProxy.href, SVC_INDEX_DEADLINE: '2' });
    t.teardown(() => server.stop());
    nodes.push(server);
  }
  /** Every object a node acknowledged (200 to its PUT and verify). */
  const acknowledged: Blob[] = [];

  const answered = async <T>(t: Test, what: string, request: Promise<T>): Promise<T> => {
    const started = Date.now();
    const r = await capped(request, `an answer to ${what}`);
    t.comment(`${what}: answered after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return r;
  };

  const assertUnavailable = (t: Test, res: Reply, what: string): void => {
    t.equal(res.status, 503, `${what}: 503`);
    t.ok(Number(res.headers['retry-after']) > 0, `${what}: with Retry-After`);
    t.type(res.json().message, 'string', `${what}: the Git LFS error body`);
  };

  /** The upload action of `b` on `server` (asked while the index answers), as a function sending the PUT. */
  const uploadAction = async (server: RunningServer, b: Blob): Promise<() => Promise<Reply>> => {
    const answer = await batch(server.url, 'acme/game', 'tok', 'upload', [{ oid: b.oid, size: b.size }]);
    const action = answer.json().objects[0].actions.upload;
    return () => http('PUT', action.href, { headers: { ...auth, 'content-type': 'application/octet-stream', ...(action.header ?? {}) }, body: b.data });
  };

  /** Every request of a client that needs the index, on every node at once: each is answered 503 + Retry-After. */
  const assertAllUnavailable = async (t: Test, what: string): Promise<void> => {
    const known = acknowledged[0]!;
    const requests = nodes.flatMap((n, i) => [
      [`${what}, node ${i}: batch`, batch(n.url, 'acme/game', 'tok', 'download', [{ oid: known.oid, size: known.size }])],
      [`${what}, node ${i}: GET`, http('GET', `${n.url}/acme/game/objects/${known.oid}`, { headers: auth })],
      [`${what}, node ${i}: PUT`, pendingPuts[i]!()],
      [`${what}, node ${i}: lock`, http('POST', `${n.url}/acme/game/locks`, { headers: { ...auth, 'content-type': LFS, accept: LFS }, body: JSON.stringify({ path: `assets/${what}-${i}.bin` }) })],
      [`${what}, node ${i}: lock list`, http('GET', `${n.url}/acme/game/locks`, { headers: { ...auth, accept: LFS } })],
    ] as const);
    const readies = nodes.map((n, i) => [`${what}, node ${i}: /ready`, http('GET', `${n.url}/ready`)] as const);
    const replies = await Promise.all(requests.map(([name, r]) => answered(t, name, r)));
    replies.forEach((r, i) => assertUnavailable(t, r, requests[i]![0]));
    const readyReplies = await Promise.all(readies.map(([name, r]) => answered(t, name, r)));
    readyReplies.forEach((r, i) => t.equal(r.status, 503, `${readies[i]![0]}: not ready`));
    for (const [i, n] of nodes.entries()) t.equal((await http('GET', `${n.url}/health`)).status, 200, `${what}, node ${i}: /health still up`);
  };

  /** One upload action per node, prepared while the index answers (the PUT is what is tested). */
  let pendingPuts: (() => Promise<Reply>)[] = [];
  const preparePuts = async (): Promise<void> => {
    pendingPuts = await Promise.all(nodes.map((n) => uploadAction(n, blob(16 << 10))));
  };

  /** Each node takes a git-lfs-like batch + PUT + verify again; retried while it is still coming back. */
  const assertRecovered = async (t: Test, what: string): Promise<void> => {
    for (const [i, n] of nodes.entries()) {
      const started = Date.now();
      const b = blob(16 << 10);
      await waitFor(async () => {
        const status = await capped(push(n.url, 'acme/game', 'tok', b), `an answer from node ${i}`);
        // Coming back, a request may still meet the outage: then a clear 503, never a hang or a 500.
        if (status !== 200 && status !== 503) throw new Error(`node ${i} answered ${status} while recovering`);
        return status === 200;
      }, `node ${i} serving again after ${what}`);
      acknowledged.push(b);
      t.comment(`${what}: node ${i} served again after ${((Date.now() - started) / 1000).toFixed(1)} s`);
      t.pass(`${what}: node ${i} takes a batch + PUT again without a restart`);
    }
    for (const [i, n] of nodes.entries()) t.equal((await http('GET', `${n.url}/ready`)).status, 200, `${what}, node ${i}: ready again`);
  };

  const setMode = (t: Test, p: FaultProxy, mode: FaultProxy['mode']): void => {
    p.setMode(mode);
    t.teardown(() => p.setMode('pass'));
  };

  t.before(async () => {
    for (const n of nodes) {
      const b = blob(16 << 10);
      if ((await push(n.url, 'acme/game', 'tok', b)) !== 200) throw new Error('the upload before any fault failed');
      acknowledged.push(b);
    }
  });

  t.test('a silent database (a partition): every request answered 503 + Retry-After; served again once it heals', async (t) => {
    await preparePuts();
    setMode(t, proxy, 'silent');
    await assertAllUnavailable(t, 'silent');
    proxy.setMode('pass');
    await assertRecovered(t, 'the partition healed');
  });

  t.test('a database resetting every connection: 503 + Retry-After; served again once it answers', async (t) => {
    await preparePuts();
    setMode(t, proxy, 'reset');
    await assertAllUnavailable(t, 'reset');
    proxy.setMode('pass');
    await assertRecovered(t, 'resets stopped');
  });

  t.test('a database restarted: served again soon after it is back', async (t) => {
    await preparePuts();
    await pg.stop();
    await assertAllUnavailable(t, 'stopped');
    await pg.restart();
    await assertRecovered(t, 'the restart');
  });

  t.test('a silent database failed over to another address: served again from there', async (t) => {
    await preparePuts();
    setMode(t, proxy, 'silent');
    await assertAllUnavailable(t, 'before the failover');
    proxy.retarget(standby.host, standby.port);
    t.teardown(() => proxy.retarget('127.0.0.1', pg.port));
    proxy.setMode('pass');
    await assertRecovered(t, 'the failover');
    t.ok(standby.accepted > 0, 'the nodes reach the database at its new address');
  });

  t.test('nothing acknowledged is lost', async (t) => {
    for (const [i, n] of nodes.entries()) {
      for (const b of acknowledged) {
        const res = await http('GET', `${n.url}/acme/game/objects/${b.oid}`, { headers: auth });
        t.equal(res.status, 200, `node ${i}: ${b.oid.slice(0, 12)} downloads`);
        t.ok(res.body.equals(b.data), `node ${i}: ${b.oid.slice(0, 12)} intact`);
      }
    }
  });
}

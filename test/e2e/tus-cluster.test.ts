import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { spawn } from 'node:child_process';
import t from 'tap';
import { startCluster } from '../helpers/cluster.js';
import { sha256File, writeRandomFile } from '../helpers/data.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { LFS, basic, blob, http } from '../helpers/lfs-http.js';
import { hasNginx } from '../helpers/nginx.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { startS3Server } from '../helpers/s3-server.js';
import { tmpDir } from '../helpers/start-server.js';
import { waitFor } from '../helpers/wait-for.js';

// Resumable uploads (tus) on two nodes sharing a PostgreSQL index and a bucket (the suite's S3
// server): the partial upload lives in the index and the bucket, so a push cut on one node goes on
// on the other. The real git-lfs (lfs.tustransfers=true) talks to a TCP proxy of the suite's own,
// which cuts the connection mid-body and from then on sends new connections to the other node (as a
// load balancer would after a failover). Tens of MiB: the > 1 GB case is tus-resume.test.ts's.
const SIZE = 48 * (1 << 20) + 12_345;

if (!hasNginx() || !hasPostgres()) {
  t.fail(hasNginx() ? POSTGRES_INSTALL_HINT : 'nginx is not installed: apt-get install -y nginx-light (.ci/run does)');
  t.end();
} else {
  const pg = await startPostgres((fn) => t.teardown(fn));
  const root = tmpDir('stowage-e2e-tus-cluster-');
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set('studio/cut', { private: true });
  forge.repos.set('studio/api', { private: true });
  forge.repos.set('studio/nginx', { private: true });
  forge.tokens.set('tok-dev', { login: 'dev', repos: { 'studio/cut': 'push', 'studio/api': 'push', 'studio/nginx': 'push' } });
  const s3 = await startS3Server(join(root, 's3'));
  t.teardown(() => s3.stop());

  // Every request of the client goes through the proxy (SVC_BASE_URL): to one node's tus listener,
  // which passes it on to that node's main listener, or (the last test) to nginx in front of both.
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: 9 });
  t.teardown(() => proxy.close());
  const base = `http://127.0.0.1:${proxy.port}`;
  const cluster = await startCluster(t, {
    nodes: 2,
    s3,
    databaseUrl: await pg.createDatabase(),
    tls: false,
    env: { SVC_FORGE_A_API_URL: forge.url, SVC_TUS_PORT: '0', SVC_BASE_URL: base },
  });
  const tusPorts = cluster.tusPorts;
  const tusUrl = (i: number): string => `http://127.0.0.1:${tusPorts[i]}`;
  /** The PATCH requests a node answered, from its request log (from its log line `from` on). */
  const patchLines = (logs: readonly string[], from = 0): Record<string, unknown>[] =>
    logs
      .slice(from)
      .map((l) => {
        try {
          return JSON.parse(l) as Record<string, unknown>;
        } catch {
          return null;
        }
      })
      .filter((ev): ev is Record<string, unknown> => ev !== null && ev.msg === 'request' && String(ev.method).toUpperCase() === 'PATCH');
  /** The statuses of the PATCH requests node i answered. */
  const patches = (i: number): unknown[] => patchLines(cluster.node(i).logs).map((ev) => ev.status);

  t.test('a push cut on one node goes on on the other, resending little; the object verifies and a clone matches', async (t) => {
    const sb = await GitSandbox.create(join(root, 'home'), base, 'tok-dev');
    await sb.git(sb.home, 'config', '--global', 'lfs.tustransfers', 'true');
    const dir = join(root, 'cut');
    const { remote, work } = await sb.newProject(dir, `${base}/studio/cut`);
    await sb.git(work, 'config', 'lfs.transfer.maxretries', '3');
    const sha = await writeRandomFile(join(work, 'big.bin'), SIZE);
    await sb.git(work, 'add', '.');
    await sb.git(work, 'commit', '-qm', 'big');

    proxy.retarget('127.0.0.1', tusPorts[0]!);
    const start = proxy.bytesUp;
    let cuts = 0;
    proxy.cutAt(start + Math.floor(SIZE * 0.6), () => {
      cuts++;
      proxy.retarget('127.0.0.1', tusPorts[1]!);
    });
    const push = spawn('git', ['push', '-q', 'origin', 'main'], { cwd: work, env: sb.env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    push.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => push.once('close', resolve));
    t.equal(code, 0, `git push succeeded: ${stderr}`);
    t.equal(cuts, 1, 'the connection was cut once');
    const sent = proxy.bytesUp - start;
    t.comment(`object ${SIZE} bytes, the nodes received ${sent} (${((sent / SIZE) * 100).toFixed(1)}%)`);
    t.ok(sent <= SIZE * 1.1, 'at most 10% more bytes than the object reached the nodes');
    t.comment(`PATCH answers: first node ${JSON.stringify(patches(0))}, second node ${JSON.stringify(patches(1))}`);
    t.ok(patches(0).length >= 1 && !patches(0).includes(204), 'the first part went to the first node, which did not complete it');
    t.ok(patches(1).includes(204), 'the PATCH that completed it ran on the second node');

    const clone = join(dir, 'clone');
    await sb.git(dir, 'clone', '-q', remote, clone);
    t.equal(await sha256File(join(clone, 'big.bin')), sha, 'the clone restored every byte');
    t.match((await http('GET', `${cluster.nodeUrl(0)}/metrics`)).body.toString(), /^svc_partial_uploads 0$/m, 'nothing partial left in the index');
  });

  t.test('a HEAD on the other node answers the durable offset while one node appends; refusals as on one node', async (t) => {
    const b = blob(20 << 20);
    const auth = { authorization: basic('tok-dev') };
    const tus = (offset: number) => ({ ...auth, 'tus-resumable': '1.0.0', 'upload-offset': String(offset), 'content-type': 'application/offset+octet-stream' });
    const offer = await http('POST', `${cluster.nodeUrl(0)}/studio/api/objects/batch`, {
      headers: { ...auth, 'content-type': LFS, accept: LFS },
      body: JSON.stringify({ operation: 'upload', transfers: ['basic', 'tus'], objects: [{ oid: b.oid, size: b.size }] }),
    });
    t.equal(offer.json().transfer, 'tus', 'the batch offers tus with a bucket and a shared index');
    const path = `/studio/api/objects/tus/${b.oid}`;
    const offsetOn = async (i: number): Promise<number> => Number((await http('HEAD', `${tusUrl(i)}${path}`, { headers: tus(0) })).headers['upload-offset']);
    t.equal(await offsetOn(1), 0, 'announced on one node, known on the other');

    // Node 0 appends: 10 MiB sent, the PATCH held open.
    const body = new PassThrough();
    const running = http('PATCH', `${tusUrl(0)}${path}`, { headers: { ...tus(0), 'content-length': String(b.size) }, body });
    let sentA = 10 << 20;
    body.write(b.data.subarray(0, sentA));
    // A byte now and then while the other node is asked: a live client, not one the listener takes for gone.
    const trickle = setInterval(() => body.write(b.data.subarray(sentA, ++sentA)), 500);
    t.teardown(() => clearInterval(trickle));
    const durable = await waitFor(async () => {
      const at = await offsetOn(1);
      return at > 0 ? at : null;
    }, 'a whole part durable, as the other node sees it');
    t.equal(durable, 8 << 20, 'the other node answers the durable offset: whole parts only');

    const second = await http('PATCH', `${tusUrl(1)}${path}`, { headers: tus(durable), body: b.data.subarray(durable) });
    t.equal(second.status, 423, `a PATCH on the other node while the first appends: 423 (${second.body.toString().slice(0, 200)})`);
    const odd = await http('PATCH', `${tusUrl(1)}${path}`, { headers: tus(12_345), body: b.data.subarray(12_345, 20_000) });
    t.equal(odd.status, 409, 'an offset that is neither the durable one nor a whole part: 409');
    t.equal(odd.headers['upload-offset'], String(durable), 'naming the durable offset');

    clearInterval(trickle);
    body.end(b.data.subarray(sentA));
    const done = await running;
    t.equal(done.status, 204, `the first PATCH completes the upload (${done.body.toString().slice(0, 200)})`);
    t.equal(done.headers['upload-offset'], String(b.size));
    const got = await http('GET', `${cluster.nodeUrl(1)}/studio/api/objects/${b.oid}`, { headers: auth });
    t.ok(got.status === 200 && got.body.equals(b.data), 'stored, and served by the other node');
    t.equal(await offsetOn(1), b.size, 'a HEAD afterwards reports the whole object');
  });

  // Last: it stops a node. nginx runs the shipped deploy/nginx/stowage.conf, its tus location sending
  // to both nodes' SVC_TUS_PORT; the cut is between git-lfs and nginx, as a dropped link would be.
  t.test('behind nginx: a push cut mid-PATCH goes on through nginx on the other node', async (t) => {
    const sb = await GitSandbox.create(join(root, 'home-nginx'), base, 'tok-dev');
    await sb.git(sb.home, 'config', '--global', 'lfs.tustransfers', 'true');
    const dir = join(root, 'nginx');
    const { remote, work } = await sb.newProject(dir, `${base}/studio/nginx`);
    await sb.git(work, 'config', 'lfs.transfer.maxretries', '3');
    const sha = await writeRandomFile(join(work, 'big.bin'), SIZE);
    await sb.git(work, 'add', '.');
    await sb.git(work, 'commit', '-qm', 'big');

    proxy.retarget('127.0.0.1', Number(new URL(cluster.url).port));
    const marks = [cluster.node(0).logs.length, cluster.node(1).logs.length];
    const accessMark = cluster.accessLog().length;
    const start = proxy.bytesUp;
    // After the cut, new connections wait while the node that had the PATCH drains and stops
    // (SIGTERM); nginx then sends everything, the HEAD and the rest's PATCH, to the other node.
    let stopped: Promise<{ first: number; logs: readonly string[] }> | null = null;
    // 1 MiB into the seventh 4 MiB part (docs/resumable-uploads.md): six whole parts are kept, and
    // what a broken PATCH loses, the part it was filling, is small beside the object.
    proxy.cutAt(start + 6 * (4 << 20) + (1 << 20), () => {
      const release = proxy.hold();
      stopped = new Promise<number>((resolve) => {
        for (const i of [0, 1]) cluster.node(i).waitForLog((ev) => ev.msg === 'request' && String(ev.method).toUpperCase() === 'PATCH', 'the cut PATCH', marks[i]).then(() => resolve(i), () => undefined);
      }).then(async (first) => {
        const { logs } = cluster.node(first);
        await cluster.kill(first, 'SIGTERM');
        release();
        return { first, logs };
      });
    });
    const push = spawn('git', ['push', '-q', 'origin', 'main'], { cwd: work, env: sb.env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    push.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => push.once('close', resolve));
    t.equal(code, 0, `git push succeeded: ${stderr}`);
    t.ok(stopped !== null, 'the connection was cut');
    if (stopped === null) return;
    const { first, logs } = await stopped;
    const other = 1 - first;
    const sent = proxy.bytesUp - start;
    t.comment(`object ${SIZE} bytes, nginx received ${sent} (${((sent / SIZE) * 100).toFixed(1)}%)`);
    t.ok(sent <= SIZE * 1.1, 'at most 10% more bytes than the object reached nginx');

    // What each node's main listener took in PATCH bodies (its request log: bytes_in).
    const firstPatches = patchLines(logs, marks[first]);
    const otherPatches = patchLines(cluster.node(other).logs, marks[other]);
    const bytesIn = (lines: Record<string, unknown>[]): number => lines.reduce((n, ev) => n + Number(ev.bytes_in), 0);
    t.comment(`PATCHes: node ${first} ${JSON.stringify(firstPatches.map((ev) => [ev.status, ev.bytes_in]))}, node ${other} ${JSON.stringify(otherPatches.map((ev) => [ev.status, ev.bytes_in]))}`);
    t.ok(bytesIn(firstPatches) > 0 && !firstPatches.some((ev) => ev.status === 204), `node ${first} took the first part (${bytesIn(firstPatches)} bytes) and did not complete it`);
    t.ok(otherPatches.some((ev) => ev.status === 204), `node ${other} completed it`);
    t.ok(bytesIn(otherPatches) > 0 && bytesIn(otherPatches) < SIZE, `node ${other} took only the rest (${bytesIn(otherPatches)} bytes)`);
    const tusRequests = cluster.accessLog().slice(accessMark).filter((l) => l.path.startsWith('/studio/nginx/objects/tus/'));
    t.ok(tusRequests.some((l) => l.method === 'PATCH'), 'the PATCHes went through nginx');
    t.same(
      [...new Set(tusRequests.flatMap((l) => l.upstreams))].filter((port) => !tusPorts.includes(port)),
      [],
      "nginx sent the tus requests to the nodes' SVC_TUS_PORT",
    );

    const clone = join(dir, 'clone');
    await sb.git(dir, 'clone', '-q', remote, clone);
    t.equal(await sha256File(join(clone, 'big.bin')), sha, 'the clone restored every byte');
    t.match((await http('GET', `${cluster.nodeUrl(other)}/metrics`)).body.toString(), /^svc_partial_uploads 0$/m, 'nothing partial left in the index');
  });
}

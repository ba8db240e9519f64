import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { pushableGame } from '../helpers/forge-emulator.js';
import { waitForDir } from '../helpers/fs-events.js';
import { basic, blob, http } from '../helpers/lfs-http.js';
import { MAIN, startServer, tmpDir } from '../helpers/start-server.js';

// One process per port and per data directory: a second server must refuse to start (exit 2, one
// line saying why) and leave the first one serving every client and owning its files.

const { env } = await pushableGame(t);
const auth = { authorization: basic('tok') };

/** Runs the server until it exits by itself; what it printed and its exit status. */
function runToExit(extra: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [MAIN], {
    env: { PATH: process.env.PATH ?? '', SVC_HOST: '127.0.0.1', SVC_PORT: '0', ...env, ...extra },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
    // A server that did start would never exit by itself: stop it, so the test sees the status.
    if (/"msg":"listening"/.test(stdout)) child.kill('SIGTERM');
  });
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

async function putAndGet(url: string, size: number): Promise<{ put: number; same: boolean }> {
  const b = blob(size);
  const put = await http('PUT', `${url}/acme/game/objects/${b.oid}`, { headers: auth, body: b.data });
  const got = await http('GET', `${url}/acme/game/objects/${b.oid}`, { headers: auth });
  return { put: put.status, same: got.status === 200 && got.body.equals(b.data) };
}

/**
 * A port the system just handed out and took back. The servers must bind it by number: Linux never
 * lets a port it picked for `port 0` be shared, SO_REUSEPORT or not, so SVC_PORT=0 would hide the bug.
 */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

t.test('a second server on the port of a running one refuses to start; the first keeps every client', async (t) => {
  const first = await startServer({ ...env, SVC_PORT: String(await freePort()) });
  t.teardown(() => first.stop());
  const second = await runToExit({ SVC_PORT: String(first.port), SVC_DATA_DIR: join(first.dataDir, 'other') });
  t.equal(second.code, 2, 'exit status 2');
  t.match(second.stderr, /^stowage: refusing to start: cannot listen on 127\.0\.0\.1:\d+: the port is in use[^\n]*\n$/, 'one line saying why');
  t.notMatch(second.stdout, /"msg":"listening"/);
  // Before, both sockets listened and the kernel gave most new connections to the empty newcomer.
  for (let i = 0; i < 12; i++) {
    const r = await putAndGet(first.url, 1000 + i);
    t.same(r, { put: 200, same: true }, `request pair ${i} served by the first server`);
  }
});

// The kernel also gives ports of its ephemeral range to outgoing connections: a server asked for
// such a port while a connection holds it must say so, not blame a server that is not there.
t.test('a port held by a connection, not a server: refused, and said so', async (t) => {
  const peer = createServer((s) => s.on('error', () => undefined)).listen(0, '127.0.0.1');
  await new Promise((r) => peer.once('listening', r));
  t.teardown(() => peer.close());
  // The kernel picks the connection's own port, as it does for curl's and git-lfs's (no SO_REUSEADDR).
  const held = connect({ host: '127.0.0.1', port: (peer.address() as AddressInfo).port });
  await new Promise((r) => held.once('connect', r));
  t.teardown(() => held.destroy());
  const port = held.localPort!;
  const dir = tmpDir();
  const second = await runToExit({ SVC_PORT: String(port), SVC_DATA_DIR: dir });
  t.equal(second.code, 2, 'exit status 2');
  t.match(second.stderr, /^stowage: refusing to start: cannot listen on 127\.0\.0\.1:\d+: the port is in use \(held by another socket[^\n]*\n$/, 'one line saying why');
});

t.test('a second server on the data directory of a running one refuses to start and touches nothing', async (t) => {
  const first = await startServer(env, { keepData: true });
  let stopped = false;
  t.teardown(() => (stopped ? undefined : first.stop()));
  // An upload in flight on the first server: its staging file is what a second process used to sweep.
  const big = blob(4_000_000);
  const sock: Socket = connect(first.port, '127.0.0.1');
  t.teardown(() => sock.destroy());
  await new Promise((r) => sock.once('connect', r));
  let answer = '';
  const answered = new Promise<void>((resolve) => {
    sock.on('data', (d) => {
      answer += d.toString();
      if (answer.includes('\r\n\r\n')) resolve();
    });
  });
  sock.write(`PUT /acme/game/objects/${big.oid} HTTP/1.1\r\nHost: x\r\nAuthorization: ${basic('tok')}\r\nContent-Length: ${big.size}\r\n\r\n`);
  sock.write(big.data.subarray(0, 1_000_000));
  const staged = await waitForDir(join(first.dataDir, 'staging'), (names) => names.some((n) => n.startsWith(big.oid)));
  t.ok(staged.length > 0, 'the first server is writing a staging file');

  const second = await runToExit({ SVC_DATA_DIR: first.dataDir });
  t.equal(second.code, 2, 'exit status 2');
  const reason = `^stowage: refusing to start: data directory ${first.dataDir} is in use by another Stowage process \\(pid ${first.child.pid}\\)[^\\n]*\\n$`;
  t.match(second.stderr, new RegExp(reason), 'one line naming the holder');
  t.notMatch(second.stdout, /"msg":"listening"/);

  sock.write(big.data.subarray(1_000_000));
  await answered;
  t.match(answer, /^HTTP\/1\.1 200 /, 'the upload in flight on the first server completes');
  const got = await http('GET', `${first.url}/acme/game/objects/${big.oid}`, { headers: auth });
  t.ok(got.status === 200 && createHash('sha256').update(got.body).digest('hex') === big.oid, 'and is served whole');
  t.same(await putAndGet(first.url, 70_000), { put: 200, same: true }, 'the first server goes on serving');

  // The lock dies with its process, however it dies: a kill -9 leaves nothing stale behind.
  stopped = true;
  await first.stop('SIGKILL');
  const next = await startServer(env, { dataDir: first.dataDir });
  t.teardown(() => next.stop());
  const again = await http('GET', `${next.url}/acme/game/objects/${big.oid}`, { headers: auth });
  t.equal(again.status, 200, 'after a kill -9 the next server starts on the directory and serves it');
});

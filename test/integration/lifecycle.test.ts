import { mkdirSync, readdirSync, utimesSync, writeFileSync, existsSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { pushableGame } from '../helpers/forge-emulator.js';
import { basic, blob, http } from '../helpers/lfs-http.js';
import { waitForDir } from '../helpers/fs-events.js';
import { startServer, tmpDir } from '../helpers/start-server.js';
import { waitFor } from '../helpers/wait-for.js';

const { env } = await pushableGame(t);

/** Starts a raw PUT and sends the first `sent` bytes; the rest is up to the caller. */
async function startUpload(port: number, data: Buffer, sent: number): Promise<{ sock: Socket; response: Promise<string> }> {
  const sock = connect(port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  const oid = (await import('node:crypto')).createHash('sha256').update(data).digest('hex');
  sock.write(`PUT /acme/game/objects/${oid} HTTP/1.1\r\nHost: x\r\nAuthorization: ${basic('tok')}\r\nContent-Length: ${data.length}\r\n\r\n`);
  sock.write(data.subarray(0, sent));
  const response = new Promise<string>((resolve) => {
    let text = '';
    sock.on('data', (d) => { text += d.toString(); });
    sock.on('close', () => resolve(text));
    sock.on('error', () => resolve(text));
  });
  return { sock, response };
}

t.test('staging litter of a crash is swept at start, however young', async (t) => {
  const dataDir = tmpDir();
  mkdirSync(join(dataDir, 'staging'), { recursive: true });
  const old = join(dataDir, 'staging', `${'a'.repeat(64)}.0123456789abcdef.part`);
  const fresh = join(dataDir, 'staging', `${'b'.repeat(64)}.0123456789abcdef.part`);
  writeFileSync(old, 'half an object');
  writeFileSync(fresh, 'written a moment before the crash');
  const past = new Date(Date.now() - 10 * 60_000);
  utimesSync(old, past, past);
  const server = await startServer(env, { dataDir });
  t.teardown(() => server.stop());
  // One process per data directory: no live writer can own a staging file at start.
  t.notOk(existsSync(old), 'old staging file removed');
  t.notOk(existsSync(fresh), 'recent staging file removed too');
  t.match(server.logs.join('\n'), /swept staging files left by an earlier run","count":2/);
});

/** Whether a new connection to the port is refused now. */
function refused(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const c = connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.destroy();
      resolve(false);
    });
    c.once('error', () => resolve(true));
  });
}

/** Resolves once the upload of `oid` has its staging file. */
function staging(dataDir: string, oid: string): Promise<string[]> {
  return waitForDir(join(dataDir, 'staging'), (names) => names.some((n) => n.startsWith(oid) && n.endsWith('.part')));
}

// 12 MB: a large upload (written with O_DIRECT, hashed off the event loop) drains and aborts the same way.
for (const size of [4_000_000, 12_000_000]) {
  t.test(`SIGTERM: stop accepting, let an in-flight upload of ${size} bytes finish, exit 0, index intact`, async (t) => {
    const dataDir = tmpDir();
    const server = await startServer({ ...env, SVC_SHUTDOWN_GRACE: '20' }, { dataDir });
    const a = blob(size);
    const { sock, response } = await startUpload(server.port, a.data, 1_000_000);
    await staging(dataDir, a.oid); // the upload is in flight
    server.child.kill('SIGTERM');
    // The upload is still waiting for its last bytes, so whatever this waits for happens while draining.
    t.ok(await waitFor(() => refused(server.port), 'new connections to be refused'), 'new connections are refused while draining');
    sock.write(a.data.subarray(1_000_000)); // no FIN: uWS treats a half-close as an abort, and real clients do not half-close
    const text = await response;
    t.match(text, /^HTTP\/1\.1 200 OK/, 'the in-flight upload completed');
    t.equal(await server.stop(), 0, 'exit code 0');

    const again = await startServer(env, { dataDir });
    t.teardown(() => again.stop());
    const got = await http('GET', `${again.url}/acme/game/objects/${a.oid}`, { headers: { authorization: basic('tok') } });
    t.equal(got.status, 200, 'object recorded and served after restart');
    t.ok(got.body.equals(a.data));
  });

  t.test(`past the grace deadline an unfinished upload of ${size} bytes is cut and leaves nothing`, async (t) => {
    const dataDir = tmpDir();
    const server = await startServer({ ...env, SVC_SHUTDOWN_GRACE: '1' }, { dataDir });
    const a = blob(size);
    const { sock, response } = await startUpload(server.port, a.data, 500_000);
    t.teardown(() => sock.destroy());
    t.equal((await staging(dataDir, a.oid)).filter((f) => f.endsWith('.part')).length, 1, 'upload staging');
    // The client keeps sending, slowly (a second of grace against about a minute of upload), so
    // only the deadline can end it: without it the upload would finish, or the server never exit.
    let at = 500_000;
    const trickle = setInterval(() => {
      if (at < a.size && !sock.destroyed) sock.write(a.data.subarray(at, (at += 10_000)));
    }, 100);
    t.teardown(() => clearInterval(trickle));
    t.equal(await server.stop('SIGTERM'), 0, 'exit 0 while the client is still sending');
    t.ok(at < a.size, 'the upload was cut before its end');
    t.notMatch(await response, /^HTTP\/1\.1 200/, 'and never acknowledged');
    t.same(readdirSync(join(dataDir, 'staging')).filter((f) => f.endsWith('.part')), [], 'staging file removed');
  });
}

t.test('a bad configuration refuses to start with a one-line reason', async (t) => {
  await t.rejects(startServer({ ...env, SVC_PORT: 'http' }), /SVC_PORT must be a whole number/);
  await t.rejects(startServer({ ...env, SVC_AUTH_CACHE_TTL: '10', SVC_AUTH_REJECTION_TTL: '20' }), /must be shorter than SVC_AUTH_CACHE_TTL/);
});

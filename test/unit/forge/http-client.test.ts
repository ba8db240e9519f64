import { createServer, type Server, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import { isLfsError } from '../../../src/errors/errors.js';
import { ForgeHttpClient } from '../../../src/forge/client.js';

// The forge HTTP client against raw sockets: what a forge (or what stands in front of it) may do
// that a well-behaved emulator never does. Each case waits for the client's answer, not a clock.

/** A TCP server answering each connection with `onConnection`; counts connections. */
async function rawServer(t: Test, onConnection: (s: Socket) => void): Promise<{ url: string; connections: () => number }> {
  let n = 0;
  const open = new Set<Socket>();
  const server: Server = createServer((s) => {
    n++;
    open.add(s);
    s.on('close', () => open.delete(s));
    onConnection(s);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const s of open) s.destroy();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, connections: () => n };
}

/** Asserts that `pending` fails as LFS_ERR_FORGE_UNREACHABLE with `reason` in its message. */
async function unreachable(t: Test, pending: Promise<unknown>, reason: RegExp, what: string): Promise<void> {
  const err = await pending.then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(isLfsError(err) && err.code === 'LFS_ERR_FORGE_UNREACHABLE', `${what}: LFS_ERR_FORGE_UNREACHABLE`);
  t.match((err as Error | null)?.message, reason, `${what}: ${String(reason)} named`);
}

const reply = (body: string, extra = ''): string => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

t.test('keep-alive: sequential requests share one connection; JSON parsed, POST body sent with its length', async (t) => {
  const seen: string[] = [];
  const srv = await rawServer(t, (s) => {
    let buf = '';
    s.on('data', (d) => {
      buf += d.toString('latin1');
      // One request at a time here: answer once its head (and any body) is in.
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      seen.push(buf.slice(0, end + 4 + length));
      buf = '';
      s.write(reply('{"ok":true}'));
    });
  });
  const client = new ForgeHttpClient(30);
  t.teardown(() => client.close());
  const a = await client.get(`${srv.url}/repos/o/r`, { authorization: 'Bearer tok' });
  t.same(a, { status: 200, headers: a.headers, body: { ok: true } }, 'parsed JSON');
  await client.get(`${srv.url}/user`, {});
  const p = await client.post(`${srv.url}/app/installations/1/access_tokens`, {}, { repositories: ['r'] });
  t.equal(p.status, 200);
  t.equal(srv.connections(), 1, 'three requests, one connection');
  t.match(seen[0], /^GET \/repos\/o\/r HTTP\/1.1\r\n/);
  t.match(seen[0], /authorization: Bearer tok\r\n/i);
  t.match(seen[0], /user-agent: stowage-lfs\r\n/i);
  t.match(seen[2], /^POST \/app\/installations\/1\/access_tokens HTTP\/1.1\r\n/);
  t.match(seen[2], /\r\ncontent-type: application\/json\r\n/i);
  t.match(seen[2], /\r\ncontent-length: 22\r\n/i, 'the length of the JSON body');
  t.match(seen[2], /\r\n\r\n\{"repositories":\["r"\]\}$/, 'and the body');
});

t.test('a forge that accepts the connection and never answers is unreachable (timeout), not a hang', async (t) => {
  const srv = await rawServer(t, () => undefined);
  const client = new ForgeHttpClient(0.3);
  t.teardown(() => client.close());
  await unreachable(t, client.get(`${srv.url}/user`, {}), /\(timeout\)/, 'GET');
});

t.test('a head sent, then a body that stops halfway: unreachable (timeout)', async (t) => {
  const srv = await rawServer(t, (s) => s.once('data', () => s.write('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"par')));
  const client = new ForgeHttpClient(0.3);
  t.teardown(() => client.close());
  await unreachable(t, client.get(`${srv.url}/user`, {}), /\(timeout\)/, 'GET');
});

t.test('a body over 1 MiB is refused without being held', async (t) => {
  const srv = await rawServer(t, (s) => s.once('data', () => s.write(`HTTP/1.1 200 OK\r\ncontent-length: ${2 << 20}\r\n\r\n${'x'.repeat(2 << 20)}`)));
  const client = new ForgeHttpClient(30);
  t.teardown(() => client.close());
  await unreachable(t, client.get(`${srv.url}/user`, {}), /FORGE_BODY_TOO_LARGE/, 'GET');
});

t.test('a connection refused, and a caller giving up, are unreachable with their reason', async (t) => {
  const srv = await rawServer(t, () => undefined);
  const closed = await rawServer(t, (s) => s.destroy());
  const client = new ForgeHttpClient(30);
  t.teardown(() => client.close());
  await unreachable(t, client.get(`${closed.url}/user`, {}), /\(ECONNRESET\)/, 'a connection closed at once');
  const caller = new AbortController();
  const pending = client.get(`${srv.url}/user`, {}, caller.signal);
  caller.abort();
  await unreachable(t, pending, /\(AbortError|ABORT_ERR\)/, 'aborted by the caller');
});

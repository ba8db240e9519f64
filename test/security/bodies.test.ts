import { connect } from 'node:net';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, http } from '../helpers/lfs-http.js';
import { rawHead, rawRequest } from '../helpers/raw-http.js';
import { JSON_BODY_ROUTES } from './routes.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// Request bodies against the real server: a caller who is not (yet) authorized may make the server
// read only a few KiB of a body; a Content-Length over the route's cap is refused at once; JSON
// nested deeper than the route's schema needs is refused before it is parsed; and /health answers
// while such bodies are coming in.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok', { login: 'root', siteAdmin: true, repos: { 'acme/game': 'admin' } });
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: 'on', SVC_IMPORT_DIR: tmpDir('stowage-sec-bodies-'), SVC_WORKERS: '1' });
t.teardown(() => server.stop());
t.teardown(() => {
  if (!t.passing()) t.comment(server.logs.filter((l) => !l.includes('"msg":"request"')).slice(-40).join('\n'));
});

const OID = 'a'.repeat(64);
const BODY_ROUTES = JSON_BODY_ROUTES;
/** The most body bytes an unauthorized caller may make the server take in (one socket read past the hold). */
const PRE_AUTH_READ_MAX = 600 * 1024;
const STREAM_LIMIT = 70 << 20;

interface Streamed {
  readonly status: number;
  readonly requestId: string;
  readonly sent: number;
}

/**
 * Sends `method path` with a chunked body of `[` (nested JSON) until the server answers or
 * STREAM_LIMIT bytes went out, waiting on the socket's drain (the server pausing) or the answer,
 * never a clock.
 */
function streamUntilAnswered(method: string, path: string, headers: Record<string, string>): Promise<Streamed> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let answered: Streamed | null = null;
    let sent = 0;
    let wake: (() => void) | null = null;
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0 || answered !== null) return;
      const head = buf.toString('latin1', 0, end);
      answered = {
        status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]),
        requestId: /\r\nx-request-id: *([^\r]+)/i.exec(head)?.[1] ?? '',
        sent,
      };
      wake?.();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      if (answered !== null || e.code === 'ECONNRESET' || e.code === 'EPIPE') wake?.();
      else reject(e);
    });
    socket.on('close', () => wake?.());
    socket.once('connect', () => {
      void (async () => {
        const lines = Object.entries({ host: 'localhost', 'content-type': 'application/json', 'transfer-encoding': 'chunked', ...headers }).map(([k, v]) => `${k}: ${v}\r\n`);
        socket.write(`${method} ${path} HTTP/1.1\r\n${lines.join('')}\r\n`);
        const piece = Buffer.concat([Buffer.from('10000\r\n'), Buffer.alloc(0x10000, '['), Buffer.from('\r\n')]);
        while (answered === null && sent < STREAM_LIMIT && !socket.destroyed) {
          sent += 0x10000;
          if (!socket.write(piece)) {
            await new Promise<void>((r) => {
              wake = r;
              socket.once('drain', r);
            });
            wake = null;
          }
        }
        if (answered === null && !socket.destroyed) {
          await new Promise<void>((r) => {
            wake = r;
            socket.write('0\r\n\r\n');
          });
        }
        socket.destroy();
        if (answered === null) reject(new Error(`${method} ${path}: no answer after ${sent} bytes`));
        else resolve(answered);
      })().catch(reject);
    });
  });
}

async function bytesInOf(requestId: string): Promise<number> {
  const line = await server.waitForLog((ev) => ev.msg === 'request' && ev.request_id === requestId, `the request line of ${requestId}`);
  return line.bytes_in as number;
}

t.test('an unauthenticated oversized body: refused after a few KiB were read', async (t) => {
  for (const [method, path] of [...BODY_ROUTES, ['PUT', `/acme/game/objects/${OID}`] as [string, string]]) {
    const res = await streamUntilAnswered(method, path, {});
    t.ok([401, 413].includes(res.status), `${method} ${path}: ${res.status}`);
    const read = await bytesInOf(res.requestId);
    t.ok(read <= PRE_AUTH_READ_MAX, `${method} ${path}: the server read ${read} bytes of ${res.sent} sent`);
  }
});

t.test('/health answers while unauthenticated bodies pour in', async (t) => {
  const floods = [1, 2, 3].map(() => streamUntilAnswered('POST', '/x/y/objects/retain', {}));
  const health = await http('GET', `${server.url}/health`);
  t.equal(health.status, 200, '/health answered');
  for (const f of await Promise.all(floods)) {
    t.equal(f.status, 401, 'each flood is refused');
    t.ok((await bytesInOf(f.requestId)) <= PRE_AUTH_READ_MAX, 'and only a few KiB of it read');
  }
});

t.test('a Content-Length over the route cap is refused at once, credentials or not', async (t) => {
  const results = await Promise.all(
    BODY_ROUTES.flatMap(([method, path]) =>
      [true, false].map(async (withToken) => {
        const head = `${method} ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${withToken ? `Authorization: ${basic('tok')}\r\n` : ''}Content-Length: ${100 << 20}\r\n\r\n{`;
        return { what: `${method} ${path} ${withToken ? 'with' : 'without'} a token`, result: await rawRequest(server.port, head) };
      }),
    ),
  );
  for (const { what, result } of results) {
    const res = result.responses[0];
    t.equal(res?.status, 413, `${what}: 413 before the body was sent`);
    if (res) t.match(JSON.parse(res.body.toString()), { message: String, request_id: String });
  }
});

t.test('JSON nested deeper than the route needs is refused with 400', async (t) => {
  const deep = '['.repeat(200) + ']'.repeat(200);
  const bodies = (path: string): string[] => {
    if (path.endsWith('/batch')) return [deep, `{"operation":"download","objects":[{"oid":"${OID}","size":1,"x":${deep}}]}`];
    if (path.endsWith('/retain')) return [deep, `{"oids":${deep}}`];
    return [deep, `{"x":${deep}}`];
  };
  for (const [method, path] of BODY_ROUTES) {
    for (const body of bodies(path)) {
      const res = await http(method, `${server.url}${path}`, { headers: { authorization: basic('tok'), 'content-type': 'application/json', accept: LFS }, body });
      t.equal(res.status, 400, `${method} ${path} ${body.slice(0, 30)}…`);
      t.match(res.json(), { message: String, request_id: String });
    }
  }
});

t.test('a route that takes no body reads none: answered, and the connection closes', async (t) => {
  // Before, uWS read such a body to its end and threw it away: 256 MiB sent to /health all went in.
  const cases: [string, string, number][] = [
    ['GET', '/health', 200],
    ['GET', '/metrics', 200],
    ['GET', '/acme/game/locks', 401],
    ['GET', `/acme/game/objects/${OID}`, 401],
    ['POST', '/no/such/route/here', 404],
  ];
  for (const [method, path, status] of cases) {
    const head = rawHead(`${method} ${path} HTTP/1.1`, ['Content-Length: 100000000', 'Accept: application/vnd.git-lfs+json'], 'x'.repeat(1000));
    const res = await rawRequest(server.port, head);
    t.equal(res.responses[0]?.status, status, `${method} ${path}: ${status}`);
    t.equal(res.responses[0]?.headers.connection, 'close', `${method} ${path}: the connection closes rather than the body being read`);
  }
  const health = await http('GET', `${server.url}/health`);
  t.equal(health.status, 200, 'a request without a body is answered as before');
});

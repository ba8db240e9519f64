import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic } from '../helpers/lfs-http.js';
import { freePort, hasNginx, selfSignedCert, startNginx, templateConf } from '../helpers/nginx.js';
import { rawHead, rawRequest } from '../helpers/raw-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// A refusal answered while the client is still sending its body (401 before credentials, 413 over
// a limit, 403, 415) must reach the client. A client that sent `Connection: close` used to get a
// reset instead now and then: the connection was closed at once with body bytes unread, and the
// kernel's reset threw the answer away before the client read it. Outcomes are counted over many
// requests; nothing here waits on a clock.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok', { login: 'w', repos: { 'acme/game': 'push' } });
const MAX_OBJECT = 1 << 20;
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: 'on', SVC_MAX_OBJECT_SIZE: String(MAX_OBJECT), SVC_WORKERS: '1' });
t.teardown(() => server.stop());
t.teardown(() => {
  if (!t.passing()) t.comment(server.logs.filter((l) => !l.includes('"msg":"request"')).slice(-40).join('\n'));
});

const OID = 'b'.repeat(64);
const BODY = Buffer.alloc(2 << 20, 'x');
const TIMES = 200;
const CONCURRENCY = 4;
/** The most body bytes an unauthorized caller may make the server take in (as in test/security/bodies.test.ts). */
const PRE_AUTH_READ_MAX = 600 * 1024;
/** What the server discards after a refusal before it closes (docs/http.md), and one socket read past it. */
const DISCARD_MAX = 8 << 20;
const ONE_READ = 512 * 1024;

interface Case {
  readonly what: string;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly status: number;
  /** Sent with Transfer-Encoding: chunked rather than a Content-Length. */
  readonly chunked?: boolean;
}

const CASES: Case[] = [
  { what: 'an upload without credentials', method: 'PUT', path: `/acme/game/objects/${OID}`, headers: {}, status: 401 },
  { what: 'an upload over the max object size', method: 'PUT', path: `/acme/game/objects/${OID}`, headers: { authorization: basic('tok') }, status: 413 },
  { what: 'a chunked JSON body over its cap', method: 'POST', path: '/-/api/session', headers: { 'content-type': LFS }, status: 413, chunked: true },
];
/** Refused the same way; fewer times each. */
const MORE_CASES: Case[] = [
  { what: 'a JSON route sent another media type', method: 'POST', path: '/acme/game/objects/jobs/abc/cancel', headers: { 'content-type': 'text/plain' }, status: 415 },
  { what: 'a body on a route that takes none', method: 'GET', path: '/acme/game/locks', headers: {}, status: 401 },
  { what: 'an upload from a foreign origin', method: 'PUT', path: `/acme/game/objects/${OID}`, headers: { authorization: basic('tok'), origin: 'https://evil.example' }, status: 403 },
];

/**
 * One request with Node's http client, no agent (so `Connection: close`), the body written in
 * 64 KiB pieces at the pace the socket takes them (as a piped file is): "<status> with its body"
 * once the answer was read to its end, or the error that came instead.
 */
function nodeRequest(c: Case, send: (headers: Record<string, string | number>) => ClientRequest = (headers) =>
  httpRequest({ host: '127.0.0.1', port: server.port, method: c.method, path: c.path, agent: false, headers })): Promise<string> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (outcome: string): void => {
      if (!settled) resolve(outcome);
      settled = true;
    };
    const headers: Record<string, string | number> = { connection: 'close', ...c.headers };
    if (!c.chunked) headers['content-length'] = BODY.length;
    const req = send(headers);
    req.on('response', (res: IncomingMessage) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('end', () => {
        let message = '(no Git LFS error body)';
        try {
          message = typeof JSON.parse(Buffer.concat(parts).toString()).message === 'string' ? 'with its body' : message;
        } catch {
          // counted as an outcome of its own
        }
        settle(`${res.statusCode} ${message}`);
      });
      res.on('error', (e: NodeJS.ErrnoException) => settle(`response cut: ${e.code ?? e.message}`));
    });
    // Once the answer is in, Node stops the request (a write after it would fail): not an outcome.
    req.on('error', (e: NodeJS.ErrnoException) => settle(`error ${e.code ?? e.message}`));
    let at = 0;
    const pump = (): void => {
      while (at < BODY.length && !req.destroyed) {
        const piece = BODY.subarray(at, at + 64 * 1024);
        at += piece.length;
        if (at >= BODY.length) req.end(piece);
        else if (!req.write(piece)) {
          req.once('drain', pump);
          return;
        }
      }
    };
    pump();
  });
}

/** Runs `one` `times` times, `CONCURRENCY` at a time, and counts the outcomes. */
async function tally(times: number, one: () => Promise<string>): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  let left = times;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (left > 0) {
        left--;
        const outcome = await one();
        counts[outcome] = (counts[outcome] ?? 0) + 1;
      }
    }),
  );
  return counts;
}

t.test('Node without an agent, Connection: close: every refusal mid-body is read', async (t) => {
  for (const [cases, times] of [[CASES, TIMES], [MORE_CASES, TIMES / 4]] as const) {
    for (const c of cases) {
      const counts = await tally(times, () => nodeRequest(c));
      t.same(counts, { [`${c.status} with its body`]: times }, `${c.what}: ${times} answers of ${c.status}`);
    }
  }
});

t.test('keep-alive clients: every refusal mid-body is read, as before', async (t) => {
  const { Agent } = await import('node:http');
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  t.teardown(() => agent.destroy());
  for (const c of CASES) {
    const counts = await tally(TIMES / 4, () =>
      nodeRequest(c, (headers) => {
        delete headers.connection;
        return httpRequest({ host: '127.0.0.1', port: server.port, method: c.method, path: c.path, agent, headers });
      }),
    );
    t.same(counts, { [`${c.status} with its body`]: TIMES / 4 }, `${c.what}: ${TIMES / 4} answers of ${c.status}`);
  }
  // The answer still tells such a client to close: the server reads no more of that connection.
  const head = rawHead(`PUT /acme/game/objects/${OID} HTTP/1.1`, [`Content-Length: ${BODY.length}`], BODY.toString('latin1'));
  const r = await rawRequest(server.port, head);
  t.equal(r.responses[0]?.status, 401, 'a raw keep-alive upload: 401');
  t.equal(r.responses[0]?.headers.connection, 'close', 'saying the connection closes');
});

const curlFile = join(tmpDir('stowage-linger-'), 'body');
writeFileSync(curlFile, BODY);

/** curl with `Connection: close` (no Expect: 100-continue): "<status>", or its exit code. */
function curlRequest(c: Case): Promise<string> {
  return new Promise((resolve) => {
    const args = ['-sS', '-o', '/dev/null', '-w', '%{http_code}', '-X', c.method, '-H', 'Connection: close', '-H', 'Expect:', '--data-binary', `@${curlFile}`];
    for (const [k, v] of Object.entries(c.headers)) args.push('-H', `${k}: ${v}`);
    if (c.chunked) args.push('-H', 'Transfer-Encoding: chunked');
    const curl = spawn('curl', [...args, `${server.url}${c.path}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    curl.stdout.on('data', (d: Buffer) => (out += d.toString()));
    curl.on('error', (e) => resolve(`curl did not run: ${e.message}`));
    curl.on('close', (code) => resolve(code === 0 ? out : `curl exit ${code} (${out})`));
  });
}

t.test('curl with Connection: close: every refusal mid-body is read', async (t) => {
  for (const c of CASES) {
    const counts = await tally(20, () => curlRequest(c));
    t.same(counts, { [String(c.status)]: 20 }, `${c.what}: 20 answers of ${c.status}`);
  }
});

/** Request line fields of one request, by its id. */
async function requestLine(requestId: string): Promise<Record<string, any>> {
  return server.waitForLog((ev) => ev.msg === 'request' && ev.request_id === requestId, `the request line of ${requestId}`);
}

/** Writes `data` on a fresh connection and resolves with every byte received until the server closes it. */
function untilClosed(data: string): Promise<Buffer> {
  return new Promise((resolve) => {
    const socket = connect(server.port, '127.0.0.1');
    const parts: Buffer[] = [];
    socket.on('data', (d: Buffer) => parts.push(d));
    socket.on('error', () => undefined); // a reset after the answer: what came before it counts
    socket.on('close', () => resolve(Buffer.concat(parts)));
    socket.write(Buffer.from(data, 'latin1'));
  });
}

t.test('answers without a body stay without one when given mid-body', async (t) => {
  // A 204 (sign-out takes no body) and a HEAD: the head and nothing after it, then the close once
  // the rest of the body was read.
  const body = 'v'.repeat(4 << 20);
  for (const [line, status] of [['DELETE /-/api/session HTTP/1.1', 204], [`HEAD /acme/game/objects/${OID} HTTP/1.1`, 401]] as const) {
    const got = (await untilClosed(rawHead(line, [`Content-Length: ${body.length}`, 'Connection: close'], body))).toString('latin1');
    t.match(got, new RegExp(`^HTTP/1\\.1 ${status} `), `${line}: answered ${status}`);
    t.equal(got.indexOf('\r\n\r\n'), got.length - 4, `${line}: the head, and no byte after it`);
    const discarded = (await requestLine(/\r\nx-request-id: *([^\r]+)/i.exec(got)?.[1] ?? '')).bytes_discarded;
    t.ok(discarded > 0, `${line}: the rest of the body was read and discarded (${discarded} bytes)`);
  }
});

t.test('a client that keeps sending after the refusal: discarded up to the bound, then closed', async (t) => {
  // Announces 256 MiB and sends it as fast as the server takes it, whatever the answer says. It
  // polls its socket between writes (setImmediate runs after the event loop's poll).
  const total = 256 << 20;
  const socket = connect(server.port, '127.0.0.1');
  let head = '';
  let sent = 0;
  let closed = false;
  let wake: (() => void) | null = null;
  socket.on('data', (d: Buffer) => (head += d.toString('latin1')));
  socket.on('error', () => wake?.());
  socket.on('close', () => {
    closed = true;
    wake?.();
  });
  await new Promise<void>((r) => socket.once('connect', r));
  socket.write(rawHead(`PUT /acme/game/objects/${OID} HTTP/1.1`, [`Content-Length: ${total}`, 'Connection: close']));
  const piece = Buffer.alloc(64 * 1024, 'y');
  while (!closed && sent < total) {
    sent += piece.length;
    if (!socket.write(piece)) {
      await new Promise<void>((r) => {
        wake = r;
        socket.once('drain', r);
      });
      wake = null;
    }
    await new Promise<void>((r) => setImmediate(r));
  }
  if (!closed) await new Promise<void>((r) => (wake = r));
  t.match(head, /^HTTP\/1\.1 401 /, 'answered 401');
  t.match(head, /\r\nconnection: close\r\n/i, 'saying the connection closes');
  t.ok(sent < total, `the server closed the connection after ${sent} of ${total} bytes`);
  const requestId = /\r\nx-request-id: *([^\r]+)/i.exec(head)?.[1] ?? '';
  const line = await requestLine(requestId);
  t.ok(line.bytes_in <= PRE_AUTH_READ_MAX, `the server took in ${line.bytes_in} bytes before the answer`);
  t.type(line.bytes_discarded, 'number', 'the request line counts the bytes discarded');
  t.ok(line.bytes_discarded <= DISCARD_MAX + ONE_READ, `and discarded ${line.bytes_discarded} bytes after it`);
});

t.test('a client that stops sending after the refusal: the server closes the connection', async (t) => {
  // Sends 1 MiB of an announced 16 MiB, then neither sends nor closes.
  const r = await rawRequest(
    server.port,
    async (s) => {
      s.write(rawHead(`PUT /acme/game/objects/${OID} HTTP/1.1`, ['Content-Length: 16777216', 'Connection: close']));
      await new Promise<void>((resolve) => s.write(Buffer.alloc(1 << 20, 'z'), () => resolve()));
    },
    { responses: 2 },
  );
  t.equal(r.responses[0]?.status, 401, 'answered 401');
  t.equal(r.responses[0]?.headers.connection, 'close', 'saying the connection closes');
  t.ok(r.closed, 'and the server closed it');
});

t.test('nothing after a refused body is run as a next request', async (t) => {
  // A client that said Connection: close and sends a next request right behind the body anyway,
  // in one write and once the refusal is in: uWS closes the connection on that request unrun.
  const body = 'w'.repeat(64 * 1024);
  const before = server.logs.length;
  const inOneWrite = rawHead(`PUT /acme/game/objects/${OID} HTTP/1.1`, [`Content-Length: ${body.length}`, 'Connection: close'], body + rawHead('GET /health HTTP/1.1'));
  const one = await rawRequest(server.port, inOneWrite, { responses: 2 });
  t.ok(one.responses.every((res) => res.status === 401), 'in one write: no answer but the refusal');
  t.ok(one.closed, 'in one write: the connection closed');
  const r = await rawRequest(
    server.port,
    async (s) => {
      s.write(rawHead(`PUT /acme/game/objects/${OID} HTTP/1.1`, [`Content-Length: ${body.length}`, 'Connection: close'], body.slice(0, 1024)));
      await new Promise<void>((resolve) => s.once('data', () => resolve()));
      s.write(body.slice(1024) + rawHead('GET /health HTTP/1.1'));
    },
    { responses: 2 },
  );
  t.same(r.responses.map((res) => res.status), [401], 'the refusal, and no answer to the request after the body');
  t.ok(r.closed, 'the connection closed');
  // One /health of our own after them: its request line is the only one of that route since.
  const barrier = await rawRequest(server.port, rawHead('GET /health HTTP/1.1'));
  await requestLine(barrier.responses[0]?.headers['x-request-id'] ?? '');
  const health = server.logs.slice(before).filter((l) => l.includes('"msg":"request"') && l.includes('"route":"health"'));
  t.equal(health.length, 1, 'no handler ran for the request after a body');
});

t.test('behind the shipped nginx: every refusal mid-body is read', { skip: hasNginx() ? false : 'nginx is not installed' }, async (t) => {
  const ports = { https: await freePort(), http: await freePort(), upstreams: [server.port] };
  const dir = tmpDir('stowage-linger-nginx-');
  const { cert, key } = selfSignedCert(dir);
  const nginx = await startNginx(tmpDir('stowage-linger-nginx-prefix-'), templateConf(ports, cert, key), ports.https);
  t.teardown(() => nginx.stop());
  const ca = readFileSync(cert);
  for (const c of CASES) {
    const counts = await tally(TIMES / 4, () =>
      nodeRequest(c, (headers) => httpsRequest({ host: '127.0.0.1', port: ports.https, method: c.method, path: c.path, agent: false, ca, headers })),
    );
    t.same(counts, { [`${c.status} with its body`]: TIMES / 4 }, `${c.what}: ${TIMES / 4} answers of ${c.status}`);
  }
  t.notMatch(readFileSync(nginx.accessLog, 'utf8'), /" 50[24] /, 'no 502 or 504 from nginx');
});

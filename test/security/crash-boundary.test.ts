import t, { type Test } from 'tap';
import { Metrics } from '../../src/metrics/registry.js';
import { RequestLog } from '../../src/http/request-log.js';
import { HttpServer } from '../../src/http/server.js';
import { send, sendJson } from '../../src/http/respond.js';
import type { RequestContext } from '../../src/http/context.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic } from '../helpers/lfs-http.js';
import { rawHead, rawRequest, type RawResult } from '../helpers/raw-http.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

// No request may end the process. Malformed credentials on every kind of route, with the request
// log on and off, against the real server; then the HTTP boundary itself, in process, with parts
// that throw at every step uWS runs synchronously.
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok-writer', { login: 'wendy', repos: { 'acme/game': 'push' } });

const OID = 'a'.repeat(64);
const b64 = (s: string, enc: BufferEncoding = 'utf8'): string => Buffer.from(s, enc).toString('base64');

/** Authorization values (latin1 on the wire, byte for byte) that no forge token can be. */
const MALFORMED: readonly string[] = [
  'Bearer a b', // the reproduction: a space inside a bearer token
  'Bearer a\tb',
  'Token a b c',
  'Basic !!!', // not base64
  'Basic ====',
  'Basic %%%%',
  `Basic ${b64('git:tok\u0001x')}`, // control characters once decoded
  `Basic ${b64('git:tok\nX-Injected: 1')}`,
  `Basic ${b64('\u0000')}`,
  `Basic ${b64('git:tōk')}`, // beyond Latin-1 once decoded
  `Basic ${b64('git:pass word')}`,
  `Basic ${b64(':')}`,
  `Basic ${b64('\u00ff\u00fe', 'latin1')}`, // decodes to invalid UTF-8
  `Bearer ${'x'.repeat(10 * 1024)}`, // a 10 KiB header
  `Bearer ${'y'.repeat(3000)} z`,
  'Bearer t\u00f6k', // an obs-text byte on the wire
  Buffer.from('Bearer tōk', 'utf8').toString('latin1'), // UTF-8 bytes on the wire
  ' tok', // empty scheme
  ' ',
  'Basic',
  'Bearer',
  'Basic ',
  'Negotiate a b',
  'Basic a b c',
];

const batchBody = JSON.stringify({ operation: 'download', objects: [{ oid: OID, size: 1 }] });
/** [method, path, extra headers, body]: a route of each kind (probes, LFS, locks, pages, dashboard, none). */
const ROUTES: readonly [string, string, string[], string][] = [
  ['GET', '/health', [], ''],
  ['GET', '/ready', [], ''],
  ['GET', '/metrics', [], ''],
  ['POST', '/acme/game/objects/batch', [`Content-Type: ${LFS}`, `Accept: ${LFS}`], batchBody],
  ['GET', `/acme/game/objects/${OID}`, [], ''],
  ['PUT', `/acme/game/objects/${OID}`, [], 'x'],
  ['GET', '/acme/game/locks', [`Accept: ${LFS}`], ''],
  ['GET', '/acme/game/objects/stats', [], ''],
  ['GET', '/acme/game', ['Accept: text/html'], ''],
  ['GET', '/-/api/overview', [], ''],
  ['GET', '/no/such/route/here', [], ''],
];

/** What came back: an answer of ours with a status below 500, or (for what uWS refuses) nothing. */
function answered(t: Test, r: RawResult, what: string): void {
  const res = r.responses[0];
  if (res === undefined) {
    // uWS drops some heads on its own (docs/http.md): no byte back, the connection closed.
    t.ok(r.closed && r.received === 0, `${what}: refused by uWS, or answered`);
    return;
  }
  t.ok(res.status >= 200 && res.status < 500, `${what}: status ${res.status} < 500`);
  if (res.status >= 400) t.match(res.headers['content-type'], /^application\/vnd\.git-lfs\+json/, `${what}: the LFS error body`);
}

async function alive(t: Test, server: RunningServer): Promise<void> {
  t.equal(server.child.exitCode, null, 'the process is still running');
  const r = await rawRequest(server.port, rawHead('GET /health HTTP/1.1'));
  t.equal(r.responses[0]?.status, 200, '/health answers');
}

for (const logging of ['true', 'false']) {
  t.test(`SVC_LOG_REQUESTS=${logging}: malformed credentials never end the process`, async (t) => {
    const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: logging });
    t.teardown(() => server.stop());

    // The exact reproduction first: curl -H 'Authorization: Bearer a b' http://HOST/health
    const repro = await fetch(`${server.url}/health`, { headers: { authorization: 'Bearer a b' } });
    t.equal(repro.status, 200, 'GET /health with "Bearer a b": answered');
    await repro.arrayBuffer();
    await alive(t, server);

    for (const [method, path, headers, body] of ROUTES) {
      for (const auth of MALFORMED) {
        const req = rawHead(`${method} ${path} HTTP/1.1`, [...headers, `Authorization: ${auth}`, `Content-Length: ${Buffer.byteLength(body)}`], body);
        const r = await rawRequest(server.port, req, { head: method === 'HEAD' });
        answered(t, r, `${method} ${path} with ${JSON.stringify(auth.slice(0, 40))}`);
      }
      // A valid token beside them still works (the log's lookup is best-effort only).
      const ok = await rawRequest(server.port, rawHead(`${method} ${path} HTTP/1.1`, [...headers, `Authorization: ${basic('tok-writer')}`, `Content-Length: ${Buffer.byteLength(body)}`], body));
      answered(t, ok, `${method} ${path} with a good token`);
    }
    await alive(t, server);
    if (logging === 'true') {
      const last = await server.waitForLog((ev) => ev.msg === 'request' && ev.route === 'not_found', 'a request line for a malformed credential');
      t.equal(last.user_id, null, 'request lines of malformed credentials name no user');
    }
    t.notMatch(server.logs.join('\n'), /uncaught|unhandled/i, 'nothing uncaught');
    t.equal(await server.stop(), 0, 'clean stop');
  });
}

/** A request log that throws where it is called, to prove the boundary holds whatever throws. */
class ThrowingLog extends RequestLog {
  constructor(readonly where: 'begin' | 'end') {
    super(() => undefined, { trustProxy: false, userIdOf: () => null });
  }
  override begin(ctx: RequestContext): void {
    if (this.where === 'begin') throw new Error('log begin failed');
    super.begin(ctx);
  }
  override end(ctx: RequestContext, status: number, ms: number): void {
    if (this.where === 'end') throw new Error('log end failed');
    super.end(ctx, status, ms);
  }
}

for (const where of ['begin', 'end'] as const) {
  t.test(`the HTTP boundary: a throw in requestLog.${where}, or in a handler after it answered, is contained`, async (t) => {
    const logged: { msg: string; fields: object }[] = [];
    const http = new HttpServer(new Metrics(), (msg, fields) => logged.push({ msg, fields }), new ThrowingLog(where));
    http.route('get', '/ok', 'ok', (ctx) => sendJson(ctx, 200, { ok: true }));
    http.route('get', '/throw-after', 'throw_after', (ctx) => {
      send(ctx, 200, 'answered');
      throw new Error('thrown after the answer');
    });
    http.route('get', '/reject-after', 'reject_after', async (ctx) => {
      send(ctx, 200, 'answered');
      await Promise.resolve();
      throw new Error('rejected after the answer');
    });
    http.route('get', '/throw', 'throw', () => {
      throw new Error('thrown before any answer');
    });
    const port = await http.listen('127.0.0.1', 0);
    t.teardown(() => http.close(0));

    for (const path of ['/ok', '/throw-after', '/reject-after', '/throw', '/ok']) {
      const r = await rawRequest(port, rawHead(`GET ${path} HTTP/1.1`));
      const status = r.responses[0]?.status;
      if (where === 'begin' || path === '/throw') t.equal(status, 500, `${path}: 500 when nothing answered yet`);
      else t.equal(status, 200, `${path}: the answer given stands`);
      if (status === 500) t.match(JSON.parse(r.responses[0]!.body.toString()), { message: 'Internal server error' }, `${path}: the LFS error body`);
    }
    t.ok(logged.some((l) => l.msg === 'unhandled error'), 'what was thrown before an answer is logged');
    if (where === 'end') t.ok(logged.some((l) => l.msg === 'error after the answer'), 'what was thrown after the answer is logged');
    // Still serving after all of it: this test process would have died with an uncaught exception otherwise.
    const again = await rawRequest(port, rawHead('GET /ok HTTP/1.1'));
    t.ok(again.responses[0] !== undefined, 'the server still answers');
  });
}

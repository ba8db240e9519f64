import t from 'tap';
import { ROUTES } from '../../src/http/route-policy.js';
import { LFS, http } from '../helpers/lfs-http.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startServer } from '../helpers/start-server.js';
import { servedRouteWalk } from './routes.js';

// The route walk on a cache node (SVC_UPSTREAM_LFS_URL), whose upstream is unreachable: every route
// the table says a cache serves is there and answers by its policy with a named status and the Git
// LFS error body (never a 404 for want of a route, a 405 or a 500); the cross-site and body-cap
// rules hold for its state-changing routes as on a node of its own.

const server = await startServer({ SVC_UPSTREAM_LFS_URL: 'http://127.0.0.1:9/{org}/{repo}', SVC_CACHE_MAX_SIZE: '1MiB', SVC_DISK_RESERVE: '0', SVC_WORKERS: '1' });
t.teardown(() => server.stop());
const WALK = servedRouteWalk(true);

t.test('every route a cache serves answers, with a named status and the LFS error body', async (t) => {
  t.ok(WALK.some(([name]) => name === 'cache_download_head') && !WALK.some(([name]) => name === 'download'), 'the walk is the cache\'s');
  for (const [name, method, path] of WALK) {
    const json = ROUTES[name].body.kind === 'json';
    const res = await http(method, `${server.url}${path}`, { headers: { accept: LFS, ...(json ? { 'content-type': 'application/json' } : {}) }, body: json ? '{}' : undefined });
    t.notOk([404, 405, 500].includes(res.status), `${name}: ${method} ${path} answered ${res.status}`);
    if (res.status >= 400 && method !== 'HEAD') t.match(res.json(), { message: String, request_id: String }, `${name}: LFS error body`);
  }
  // A refused route with a streamed body reads none of it: answered, and the connection closes.
  const patch = `PATCH /acme/game/objects/tus/${'a'.repeat(64)} HTTP/1.1\r\nHost: localhost\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: ${100 << 20}\r\n\r\n${'x'.repeat(1000)}`;
  const refused = (await rawRequest(server.port, patch)).responses[0];
  t.equal(refused?.status, 501, 'tus PATCH: refused');
  t.equal(refused?.headers.connection, 'close', 'tus PATCH: its body unread, the connection closes');
  const verify = await http('POST', `${server.url}/acme/game/objects/verify`, { headers: { accept: LFS, 'content-type': 'application/json' }, body: '{}' });
  // The path is an object's (PUT), so the answer is 405 rather than 404; either way nothing is served.
  t.ok([404, 405].includes(verify.status), `a route the table does not give a cache is not there (${verify.status})`);
  t.match(verify.json(), { message: String, request_id: String });
});

t.test('state-changing routes refuse foreign origins and form types; bodies over the cap at once', async (t) => {
  const changing = WALK.filter(([name]) => ROUTES[name].changesState && ROUTES[name].body.kind === 'json');
  t.ok(changing.length > 0);
  for (const [name, method, path] of changing) {
    const foreign = await http(method, `${server.url}${path}`, { headers: { origin: 'https://evil.example', 'content-type': 'application/json', accept: LFS }, body: '{}' });
    t.equal(foreign.status, 403, `${name}: foreign Origin`);
    const form = await http(method, `${server.url}${path}`, { headers: { 'content-type': 'text/plain' }, body: '{}' });
    t.equal(form.status, 415, `${name}: a form's type`);
    const head = `${method} ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${100 << 20}\r\n\r\n{`;
    t.equal((await rawRequest(server.port, head)).responses[0]?.status, 413, `${name}: Content-Length over the cap`);
  }
});

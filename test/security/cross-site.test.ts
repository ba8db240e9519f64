import t, { type Test } from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, blob, http, push } from '../helpers/lfs-http.js';
import { JSON_BODY_ROUTES } from './routes.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// Cross-site requests against the real server: a browser that holds Basic credentials for this
// host (the repository page asks for them) sends them with any request another site's page makes.
// A page can make a browser send, without a preflight, a POST whose Content-Type is text/plain,
// application/x-www-form-urlencoded or multipart/form-data (or none), with an Origin of its own or
// "null". Every state-changing route must refuse all of them before acting: 415 for the content
// type, 403 for a foreign Origin, each with the Git LFS error body.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
// The strongest caller: a forge site admin who administers the repository.
forge.tokens.set('tok', { login: 'root', siteAdmin: true, repos: { 'acme/game': 'admin' } });
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_IMPORT_DIR: tmpDir('stowage-sec-xs-'), SVC_WORKERS: '1' });
t.teardown(() => server.stop());
const own = new URL(server.url).origin;
const auth = { authorization: basic('tok') };

const stored = blob(1000);
t.equal(await push(server.url, 'acme/game', 'tok', stored), 200, 'an object to protect');

const FORM_BODY = '{"oids":[],"x":"="}';
const ROUTES = JSON_BODY_ROUTES;
const SIMPLE_TYPES: (string | null)[] = ['text/plain', 'text/plain; charset=utf-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=----x', null];

function refused(t: Test, res: Awaited<ReturnType<typeof http>>, statuses: number[], what: string): void {
  t.ok(statuses.includes(res.status), `${what}: ${res.status} is one of ${statuses.join('/')}`);
  t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/, `${what}: LFS error body`);
  let body: unknown = null;
  try {
    body = res.json();
  } catch {
    // asserted below
  }
  t.match(body, { message: String, request_id: String }, `${what}: message and request id`);
}

t.test('simple (no-preflight) requests from a foreign or null Origin are refused', async (t) => {
  for (const [method, path] of ROUTES) {
    for (const type of SIMPLE_TYPES) {
      for (const origin of ['https://evil.example', 'null']) {
        const headers: Record<string, string> = { ...auth, origin };
        if (type !== null) headers['content-type'] = type;
        const res = await http(method, `${server.url}${path}`, { headers, body: FORM_BODY });
        refused(t, res, [403, 415], `${method} ${path} ${type ?? '(no type)'} from ${origin}`);
      }
    }
  }
});

t.test('without an Origin, a type a form can send is refused (415)', async (t) => {
  for (const [method, path] of ROUTES) {
    for (const type of SIMPLE_TYPES) {
      const headers: Record<string, string> = { ...auth };
      if (type !== null) headers['content-type'] = type;
      refused(t, await http(method, `${server.url}${path}`, { headers, body: FORM_BODY }), [415], `${method} ${path} ${type ?? '(no type)'}`);
    }
    // An empty body is no exception: a form posts one as easily.
    refused(t, await http(method, `${server.url}${path}`, { headers: { ...auth } }), [415], `${method} ${path} empty, no type`);
  }
});

t.test('a JSON request from a foreign Origin is refused (403), ours is served', async (t) => {
  for (const [method, path] of ROUTES) {
    for (const type of ['application/json', `${LFS}; charset=utf-8`]) {
      const res = await http(method, `${server.url}${path}`, { headers: { ...auth, origin: 'https://evil.example', 'content-type': type, accept: LFS }, body: FORM_BODY });
      refused(t, res, [403], `${method} ${path} ${type} from a foreign origin`);
    }
  }
  for (const [method, path] of [['DELETE', '/-/api/session'], ['DELETE', '/-/api/access']] as const) {
    refused(t, await http(method, `${server.url}${path}`, { headers: { ...auth, origin: 'https://evil.example' } }), [403], `${method} ${path} from a foreign origin`);
  }
  // An upload needs a preflight (PUT), but a foreign Origin is refused there too.
  const other = blob(10);
  const put = await http('PUT', `${server.url}/acme/game/objects/${other.oid}`, { headers: { ...auth, origin: 'https://evil.example', 'content-type': 'text/plain' }, body: other.data });
  refused(t, put, [403], 'PUT upload from a foreign origin');
  const ours = await http('POST', `${server.url}/acme/game/objects/audit`, { headers: { ...auth, origin: own, 'content-type': 'application/json' }, body: '{}' });
  t.equal(ours.status, 200, 'our own origin with JSON is served');
  const ok = await http('GET', `${server.url}/acme/game/objects/${stored.oid}`, { headers: auth });
  t.equal(ok.status, 200, 'the object is still there');
  t.same(ok.body, stored.data);
  const notStored = await http('GET', `${server.url}/acme/game/objects/${other.oid}`, { headers: auth });
  t.equal(notStored.status, 404, 'the cross-site upload stored nothing');
});

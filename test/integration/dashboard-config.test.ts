import t from 'tap';
import { request } from 'undici';
import { startServer } from '../helpers/start-server.js';

/** The dashboard's SVC_ variables: each bad value stops the server at start with its exact message. */
const CASES: [Record<string, string>, RegExp][] = [
  [{ SVC_ADMIN_REPO: 'just-an-org' }, /SVC_ADMIN_REPO must name one repository as org\/repo, got "just-an-org"/],
  [{ SVC_ADMIN_REPO: 'a/b/c' }, /SVC_ADMIN_REPO must name one repository as org\/repo/],
  [{ SVC_ALLOWED_REPOS: 'acme, a/b/c' }, /SVC_ALLOWED_REPOS must list organisations or org\/repo patterns such as acme, acme\/game-\*; got "a\/b\/c"/],
  [{ SVC_ALLOWED_REPOS: 'acme/..' }, /SVC_ALLOWED_REPOS must list organisations/],
  [{ SVC_ANONYMOUS_READ: 'maybe' }, /SVC_ANONYMOUS_READ must be true or false, got "maybe"/],
  [{ SVC_MAX_OBJECT_SIZE: 'lots' }, /SVC_MAX_OBJECT_SIZE must be a size such as 1000, 64KiB, 4MiB or 5GiB, got "lots"/],
  [{ SVC_REPO_QUOTA: '5 parsecs' }, /SVC_REPO_QUOTA must be a size/],
  [{ SVC_SESSION_TTL: '10' }, /SVC_SESSION_TTL must be between 60 and 2592000 seconds, got "10"/],
  [{ SVC_SESSION_TTL: '31d' }, /SVC_SESSION_TTL must be between 60 and 2592000 seconds/],
];

for (const [env, message] of CASES) {
  t.test(`refuses ${JSON.stringify(env)}`, async (t) => {
    const err = await startServer(env).then(
      async (s) => {
        await s.stop();
        return null;
      },
      (e: Error) => e,
    );
    t.ok(err, 'the server did not start');
    t.match(err?.message ?? '', /server exited with 2 before listening/);
    t.match(err?.message ?? '', message);
  });
}

t.test('accepts good values', async (t) => {
  const s = await startServer({ SVC_ADMIN_REPO: 'ops/stowage', SVC_ALLOWED_REPOS: 'Acme acme/game-* other/one', SVC_ANONYMOUS_READ: 'off', SVC_MAX_OBJECT_SIZE: '5GiB', SVC_REPO_QUOTA: '2T', SVC_SESSION_TTL: '12h' });
  t.teardown(() => s.stop());
  // Both refusals come from the values just given, before any forge is asked.
  const batch = (repo: string) => request(`${s.url}/${repo}/objects/batch`, {
    method: 'POST',
    headers: { 'content-type': 'application/vnd.git-lfs+json', accept: 'application/vnd.git-lfs+json' },
    body: JSON.stringify({ operation: 'download', objects: [] }),
  });
  const outside = await batch('evil/thing');
  t.equal(outside.statusCode, 403, 'a repository outside SVC_ALLOWED_REPOS is refused');
  t.match(await outside.body.text(), /does not serve evil\/thing/);
  const anonymous = await batch('acme/game-one');
  await anonymous.body.dump();
  t.equal(anonymous.statusCode, 401, 'SVC_ANONYMOUS_READ=off: an allowed repository still wants credentials');
});

import t from 'tap';
import { CacheLedger } from '../../../src/cache/cache-ledger.js';
import { LinkSigner, credentialDigest, type LinkGrant, type UpstreamActions } from '../../../src/cache/link-signer.js';
import { ConfigError, loadConfig } from '../../../src/config/load.js';
import { isLfsError } from '../../../src/errors/errors.js';
import type { Oid } from '../../../src/protocol/oid.js';
import type { StoredObject } from '../../../src/store/types.js';

const OID = 'a'.repeat(64) as Oid;
const ACTIONS: UpstreamActions = { transfer: { href: 'https://upstream.example/o', header: { Authorization: 'RemoteAuth x' } }, verify: null, authenticated: true };

t.test('cache mode settings: both placeholders, http(s), a long enough secret', async (t) => {
  t.equal(loadConfig({}).cache, null, 'off by default');
  const c = loadConfig({ SVC_UPSTREAM_LFS_URL: 'https://github.com/{org}/{repo}.git/info/lfs/', SVC_CACHE_MAX_SIZE: '2GiB' }).cache!;
  t.equal(c.upstreamTemplate, 'https://github.com/{org}/{repo}.git/info/lfs');
  t.equal(c.maxSize, 2 * 2 ** 30);
  t.equal(c.linkSecret, null, 'a random secret per process');
  const refusals: [Record<string, string>, RegExp][] = [
    [{ SVC_UPSTREAM_LFS_URL: 'https://github.com/{org}/x.git/info/lfs' }, /must contain both \{org\} and \{repo\}/],
    [{ SVC_UPSTREAM_LFS_URL: 'ftp://h/{org}/{repo}' }, /must use http or https/],
    [{ SVC_UPSTREAM_LFS_URL: 'https://u:p@h/{org}/{repo}' }, /must not carry credentials/],
    [{ SVC_UPSTREAM_LFS_URL: 'https://h/{org}/{repo}', SVC_CACHE_LINK_SECRET: 'short' }, /SVC_CACHE_LINK_SECRET must be at least 32/],
    [{ SVC_UPSTREAM_LFS_URL: 'https://h/{org}/{repo}', SVC_CACHE_MAX_SIZE: '0' }, /SVC_CACHE_MAX_SIZE/],
  ];
  for (const [env, message] of refusals) {
    t.throws(() => loadConfig(env), ConfigError);
    t.throws(() => loadConfig(env), { message }, message.source);
  }
});

t.test('a link is refused for another credential, repository, object or operation, and after its expiry', async (t) => {
  let now = 1_000_000;
  const signer = new LinkSigner(null, () => now);
  const credential = credentialDigest('Basic YWxpY2U6dG9r');
  const grant: LinkGrant = { op: 'download', repo: 'acme/game', oid: OID, size: 10, credential, expiresAt: now + 60_000 };
  const query = signer.issue(grant, ACTIONS);
  t.notMatch(query, /YWxpY2U6dG9r|RemoteAuth/, 'neither credential is in the link');
  const want = { op: 'download', repo: 'acme/game', oid: OID, credential } as const;
  t.same(signer.check(query, want, null), { size: 10, upstream: ACTIONS }, 'the link as issued');
  const refused = (q: string, w: typeof want | Record<string, unknown>, what: string): void => {
    let caught: unknown = null;
    try {
      signer.check(q, w as typeof want, null);
    } catch (e) {
      caught = e;
    }
    t.ok(isLfsError(caught) && caught.code === 'LFS_ERR_LINK_REFUSED', what);
  };
  refused(query, { ...want, credential: credentialDigest('Basic Ym9iOnRvaw==') }, 'another credential');
  refused(query, { ...want, repo: 'acme/other' }, 'another repository');
  refused(query, { ...want, oid: 'b'.repeat(64) }, 'another object');
  refused(query, { ...want, op: 'upload' }, 'another operation');
  refused(query.replace(/\.(\d+)\./, (_, e: string) => `.${Number(e) + 60_000}.`), want, 'a later expiry written in');
  refused('', want, 'no link');
  now += 59_999;
  t.equal(signer.check(query, want, null).size, 10, 'still valid a millisecond before expiry');
  now += 1;
  refused(query, want, 'at its expiry');
});

t.test('with a fixed secret a link outlives the process for cached objects only', async (t) => {
  const secret = 'x'.repeat(40);
  const before = new LinkSigner(secret, () => 5);
  const credential = credentialDigest('Bearer t');
  const query = before.issue({ op: 'download', repo: 'acme/game', oid: OID, size: 10, credential, expiresAt: 1000 }, ACTIONS);
  const after = new LinkSigner(secret, () => 5);
  const want = { op: 'download', repo: 'acme/game', oid: OID, credential } as const;
  t.same(after.check(query, want, 10), { size: 10, upstream: null }, 'checked against the cached size; the upstream actions are gone');
  t.throws(() => after.check(query, want, null), { code: 'LFS_ERR_LINK_REFUSED' }, 'nothing cached: refused');
  t.throws(() => after.check(query, want, 11), { code: 'LFS_ERR_LINK_REFUSED' }, 'another size cached: refused');
  t.throws(() => new LinkSigner(null, () => 5).check(query, want, 10), { code: 'LFS_ERR_LINK_REFUSED' }, 'another process secret: refused');
});

t.test('the ledger evicts least recently used first, never a pinned object, and rebuilds from the store', async (t) => {
  const oid = (c: string): Oid => c.repeat(64) as Oid;
  const held = new Map<Oid, number>([
    [oid('1'), 4],
    [oid('2'), 4],
  ]);
  const store = {
    async delete(o: Oid) {
      return held.delete(o);
    },
    async *list(): AsyncIterable<StoredObject> {
      for (const [o, storedSize] of held) yield { oid: o, storedSize };
    },
  };
  let evicted = 0;
  const ledger = await CacheLedger.open(store, 10, null, { evicted: () => evicted++ });
  t.equal(ledger.bytes, 8, 'rebuilt from the store');
  t.equal(ledger.use(oid('1')), 4, 'oid 1 used: 2 is now the oldest');
  const unpin = ledger.pin(oid('2'));
  const room = await ledger.promise(4);
  t.ok(room, 'room made');
  t.notOk(held.has(oid('1')), 'the oldest unpinned went');
  t.ok(held.has(oid('2')), 'the pinned one stayed');
  t.equal(await ledger.promise(4), null, 'no room while everything left is pinned or promised');
  unpin();
  room!();
  t.equal(await ledger.promise(11), null, 'larger than the cap: never');
  t.equal(evicted, 1);
});

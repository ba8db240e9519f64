import t from 'tap';
import { parseRange } from '../../../src/protocol/range.js';
import { parseOid, shardPath } from '../../../src/protocol/oid.js';
import { parseRepoName, repoKey } from '../../../src/protocol/repo-name.js';
import { parseBatchRequest, MAX_BATCH_OBJECTS } from '../../../src/protocol/batch.js';
import { acceptsLfsJson, isJsonRequestType } from '../../../src/protocol/media-types.js';
import { tokenFromAuthorization } from '../../../src/http/auth.js';
import { isLfsError } from '../../../src/errors/errors.js';

const OID = 'a'.repeat(64);

t.test('parseRange: resume ranges, 416, ignored junk, RFC 9110 single ranges', async (t) => {
  t.same(parseRange('bytes=0-9', 100), { kind: 'range', start: 0, end: 9 });
  t.same(parseRange('bytes=90-', 100), { kind: 'range', start: 90, end: 99 });
  t.same(parseRange('bytes=-10', 100), { kind: 'range', start: 90, end: 99 });
  t.same(parseRange('bytes=-1000', 100), { kind: 'range', start: 0, end: 99 }, 'suffix longer than object is the whole object');
  t.same(parseRange('bytes=50-1000', 100), { kind: 'range', start: 50, end: 99 }, 'end clamped');
  t.same(parseRange('bytes=100-', 100), { kind: 'unsatisfiable' });
  t.same(parseRange('bytes=100-200', 100), { kind: 'unsatisfiable' });
  t.same(parseRange('bytes=-0', 100), { kind: 'unsatisfiable' });
  t.same(parseRange('bytes=0-0', 0), { kind: 'unsatisfiable' }, 'nothing is satisfiable in an empty object');
  t.same(parseRange('bytes=10-5', 100), { kind: 'none' }, 'end before start is invalid: ignored');
  t.same(parseRange('bytes=0-1,5-6', 100), { kind: 'none' }, 'several ranges: ignored, whole object');
  t.same(parseRange('items=0-1', 100), { kind: 'none' });
  t.same(parseRange('bytes=abc', 100), { kind: 'none' });
  t.same(parseRange('bytes=-', 100), { kind: 'none' });
  const fiveG = 5 * 1024 ** 3;
  t.same(parseRange(`bytes=${fiveG - 1048576}-`, fiveG), { kind: 'range', start: fiveG - 1048576, end: fiveG - 1 }, '64-bit offsets');
  t.same(parseRange('bytes=99999999999999999999-', fiveG), { kind: 'unsatisfiable' }, 'absurd offsets are unsatisfiable, not wrapped');
});

t.test('parseOid and shardPath', async (t) => {
  t.equal(parseOid(OID), OID);
  t.equal(parseOid('A'.repeat(64)), null, 'uppercase refused');
  t.equal(parseOid('a'.repeat(63)), null);
  t.equal(parseOid('../' + 'a'.repeat(61)), null);
  t.equal(parseOid(42), null);
  t.equal(shardPath(parseOid(OID)!), `aa/aa/${OID}`);
});

t.test('parseRepoName refuses anything that could escape a path', async (t) => {
  t.same(parseRepoName('acme', 'game-assets.v2'), { org: 'acme', repo: 'game-assets.v2', name: 'acme/game-assets.v2', key: 'acme/game-assets.v2' });
  // One key per repository, however spelt; the spelling is kept for the forge.
  t.same(parseRepoName('Acme', 'Game.GIT'), { org: 'Acme', repo: 'Game', name: 'Acme/Game', key: 'acme/game' });
  t.equal(repoKey('Acme/Game.git'), 'acme/game', 'repoKey: what the migrations apply to stored names');
  t.equal(repoKey(parseRepoName('ACME', 'game.git')!.key), 'acme/game', 'and idempotent on a parsed key');
  t.equal(parseRepoName('acme', 'game.git.git'), null, 'a name ending in .git once stripped names no forge repository');
  for (const bad of ['..', '.', '%2e%2e', 'a/b', 'a\\b', '', 'x'.repeat(101), '.hidden', 'a b', 'a%00']) {
    t.equal(parseRepoName(bad, 'repo'), null, `org ${JSON.stringify(bad)}`);
    t.equal(parseRepoName('org', bad), null, `repo ${JSON.stringify(bad)}`);
  }
});

t.test('parseBatchRequest', async (t) => {
  const ok = parseBatchRequest({ operation: 'upload', objects: [{ oid: OID, size: 5 }], transfers: ['lfs-standalone-file', 'basic', 'ssh'], ref: {}, hash_algo: 'sha256' });
  t.equal(ok.operation, 'upload');
  t.equal(ok.objects[0]!.parsedOid, OID);
  t.equal(ok.refName, null, 'ref {} is accepted');
  const bad = parseBatchRequest({ operation: 'download', objects: [{ oid: 'nope', size: 1 }, { oid: OID, size: -1 }, { oid: OID, size: 1.5 }, { oid: OID, size: 2 ** 60 }] });
  t.match(bad.objects.map((o) => o.invalid), [/oid/, /size/, /size/, /size/], 'bad entries are kept and flagged, not dropped');
  t.same(bad.objects.map((o) => o.size), [1, -1, 0, 2 ** 60], 'sizes echoed as sent; a fraction (undecodable as int64) becomes 0');
  const odd = parseBatchRequest({ operation: 'download', objects: [{ oid: OID, size: '5' }, { oid: OID, size: -(2 ** 64) }, { oid: OID }] });
  t.same(odd.objects.map((o) => o.size), [0, 0, 0], 'not a number, or past int64: 0');
  t.equal(parseBatchRequest({ operation: 'upload', objects: [] }).operation, 'upload', 'no transfers: basic is assumed');
  const throwsCode = (body: unknown, code: string): void => {
    try {
      parseBatchRequest(body);
      t.fail(`expected ${code}`);
    } catch (e) {
      t.ok(isLfsError(e) && e.code === code, `${JSON.stringify(body).slice(0, 60)} → ${code}`);
    }
  };
  throwsCode({ operation: 'delete', objects: [] }, 'LFS_ERR_BAD_REQUEST');
  throwsCode({ operation: 'upload' }, 'LFS_ERR_BAD_REQUEST');
  throwsCode([], 'LFS_ERR_BAD_REQUEST');
  throwsCode({ operation: 'upload', objects: [], ref: 'main' }, 'LFS_ERR_BAD_REQUEST');
  throwsCode({ operation: 'upload', objects: Array.from({ length: MAX_BATCH_OBJECTS + 1 }, () => ({ oid: OID, size: 1 })) }, 'LFS_ERR_BATCH_TOO_LARGE');
  // batch.md: the answer's transfer "MUST be one of the given transfer identifiers".
  throwsCode({ operation: 'download', objects: [], transfers: ['lfs-standalone-file', 'ssh'] }, 'LFS_ERR_TRANSFER_UNSUPPORTED');
  throwsCode({ operation: 'download', objects: [], transfers: [] }, 'LFS_ERR_TRANSFER_UNSUPPORTED');
  throwsCode({ operation: 'download', objects: [], transfers: ['Basic'] }, 'LFS_ERR_TRANSFER_UNSUPPORTED');
});

t.test('media types', async (t) => {
  t.ok(isJsonRequestType('application/vnd.git-lfs+json'));
  t.ok(isJsonRequestType('application/vnd.git-lfs+json; charset=utf-8'));
  t.ok(isJsonRequestType('Application/Vnd.Git-Lfs+JSON;charset=UTF-8'));
  t.notOk(isJsonRequestType('text/plain'));
  t.notOk(isJsonRequestType(''));
  t.ok(acceptsLfsJson(''));
  t.ok(acceptsLfsJson('application/vnd.git-lfs+json'));
  t.ok(acceptsLfsJson('text/html, */*;q=0.1'));
  t.notOk(acceptsLfsJson('text/html'));
});

t.test('tokenFromAuthorization: Basic password (any username) or Bearer', async (t) => {
  const basic = (s: string): string => `Basic ${Buffer.from(s).toString('base64')}`;
  t.equal(tokenFromAuthorization(basic('anyone:tok123')), 'tok123');
  t.equal(tokenFromAuthorization(basic('gitlab-ci-token:glcbt-xyz')), 'glcbt-xyz');
  t.equal(tokenFromAuthorization(basic('tok123:x-oauth-basic')), 'tok123');
  t.equal(tokenFromAuthorization(basic('tok123:')), 'tok123');
  t.equal(tokenFromAuthorization('Bearer abc.def'), 'abc.def');
  t.equal(tokenFromAuthorization('bearer abc'), 'abc');
  t.equal(tokenFromAuthorization('token abc'), 'abc');
  t.equal(tokenFromAuthorization(''), null);
  t.equal(tokenFromAuthorization('Bearer '), null);
  t.equal(tokenFromAuthorization('Negotiate xyz'), null);
  t.equal(tokenFromAuthorization(basic(':')), null);
});

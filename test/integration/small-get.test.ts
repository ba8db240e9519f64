import { join } from 'node:path';
import t from 'tap';
import { parseOid, shardPath } from '../../src/protocol/oid.js';
import { textLike } from '../helpers/data.js';
import { pushableGame } from '../helpers/forge-emulator.js';
import { basic, batch, blob, blobOf, http, push, type Blob, type Reply } from '../helpers/lfs-http.js';
import { startServer, tmpDir, waitForFile } from '../helpers/start-server.js';

// A clone's GET right after its batch is answered in line (routes/objects.ts, BlobStore.openInLine):
// the same status, headers and bytes as the GET through the store's readers, for plain and framed
// small objects, and never to a caller or repository the batch did not grant it to.

const { forge, env } = await pushableGame(t);
forge.repos.set('acme/other', { private: true });
forge.tokens.set('tok', { login: 'dev', repos: { 'acme/game': 'push', 'acme/other': 'pull' } });
forge.tokens.set('tok-other', { login: 'visitor', repos: { 'acme/other': 'pull' } });
const dataDir = tmpDir();
const server = await startServer({ ...env, SVC_COMPRESSION: 'zstd:3' }, { dataDir });
t.teardown(() => server.stop());

const objectUrl = (repo: string, b: Blob): string => `${server.url}/${repo}/objects/${b.oid}`;
const get = (repo: string, b: Blob, token = 'tok', extra: Record<string, string> = {}): Promise<Reply> => http('GET', objectUrl(repo, b), { headers: { authorization: basic(token), ...extra } });
async function granted(repo: string, b: Blob, token = 'tok'): Promise<void> {
  const res = await batch(server.url, repo, token, 'download', [{ oid: b.oid, size: b.size }]);
  if (res.json().objects[0]?.actions?.download === undefined) throw new Error(`the batch did not offer ${b.oid}: ${res.body.toString()}`);
}
/** The headers a download answers with, but for the request id each answer has its own of. */
const headersOf = (r: Reply): Record<string, unknown> => ({ 'content-type': r.headers['content-type'], 'content-length': r.headers['content-length'], 'accept-ranges': r.headers['accept-ranges'] });

const objects = {
  'plain (incompressible)': blob(64 << 10),
  'framed (compressible, zstd:3)': blobOf(textLike(64 << 10, 7)),
  tiny: blob(100),
};
t.before(async () => {
  for (const b of Object.values(objects)) {
    const status = await push(server.url, 'acme/game', 'tok', b);
    if (status !== 200) throw new Error(`the push of ${b.size} bytes answered ${status}`);
    // Small objects are acknowledged from the journal; in line needs their own file.
    await waitForFile(join(dataDir, 'objects', shardPath(parseOid(b.oid)!)));
  }
});

for (const [what, b] of Object.entries(objects)) {
  t.test(`${what}: the GET after its batch answers as any GET does`, async (t) => {
    await granted('acme/game', b);
    const first = await get('acme/game', b);
    t.equal(first.status, 200, 'right after the batch: 200');
    t.ok(first.body.equals(b.data), 'the object\'s bytes');
    t.same(headersOf(first), { 'content-type': 'application/octet-stream', 'content-length': String(b.size), 'accept-ranges': 'bytes' }, 'its headers');
    t.match(first.headers['x-request-id'], /^[0-9a-f]{8}-[0-9a-f]+$/, 'a request id');
    const again = await get('acme/game', b);
    t.equal(again.status, 200, 'the grant used up, the next GET goes through the index: 200');
    t.ok(again.body.equals(b.data), 'the same bytes');
    t.same(headersOf(again), headersOf(first), 'the same headers');

    await granted('acme/game', b);
    const ranged = await get('acme/game', b, 'tok', { range: 'bytes=10-19' });
    t.equal(ranged.status, 206, 'a Range right after the batch: 206');
    t.ok(ranged.body.equals(b.data.subarray(10, 20)), 'the range asked for');
    t.equal(ranged.headers['content-range'], `bytes 10-19/${b.size}`, 'with its Content-Range');
  });
}

t.test('a batch grants one repository to callers allowed to read it, nothing more', async (t) => {
  const b = objects['plain (incompressible)'];
  await granted('acme/game', b);
  const stranger = await get('acme/game', b, 'tok-other');
  t.equal(stranger.status, 404, 'a caller without access to the repository: 404, though the batch granted the GET');
  t.equal(stranger.body.length > 0 && stranger.json().message !== undefined, true, 'with the Git LFS error body');
  const elsewhere = await get('acme/other', b);
  t.equal(elsewhere.status, 404, 'the oid through a repository that does not hold it: 404');
  const refused = await http('GET', objectUrl('acme/game', b), { headers: { authorization: basic('not-a-token') } });
  t.equal(refused.status, 401, 'a token the forge refuses: 401');
  const owner = await get('acme/game', b);
  t.equal(owner.status, 200, 'the grant was still there for the caller it was made for');
  t.ok(owner.body.equals(b.data), 'with the bytes');
});

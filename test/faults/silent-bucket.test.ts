import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { pushableGame } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, push, type Blob, type Reply } from '../helpers/lfs-http.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';
import { capped, waitFor } from '../helpers/wait-for.js';

// The bucket behind a TCP proxy that can go silent (accepts, never answers), reset every connection,
// or answer slowly. A node whose bucket is silent answers what needs the bucket with 503 and
// Retry-After within its deadline (SVC_S3_DEADLINE, set low here), gives up multipart uploads it
// cannot finish (aborted once the bucket answers again), and serves again as soon as the bucket
// does, without a restart. A slow bucket that keeps making progress is still served whole.

const { env } = await pushableGame(t);
const auth = { authorization: basic('tok') };
const s3 = await startS3Server(tmpDir('stowage-silent-bucket-'));
t.teardown(() => s3.stop());
const proxy = await startFaultProxy({ host: '127.0.0.1', port: s3.port });
t.teardown(() => proxy.close());
const uploadsDir = join(s3.dir, s3.bucket, '._S3rver_uploads');

async function node(t: Test, extra: Record<string, string>): Promise<RunningServer> {
  const server = await startServer({ ...env, ...s3.env({ SVC_S3_ENDPOINT: `http://${proxy.host}:${proxy.port}` }), ...extra });
  t.teardown(() => server.stop());
  return server;
}

/** The upload action of `b` (asked while the bucket answers), as a function sending the PUT with `body`. */
async function uploadAction(server: RunningServer, b: Blob): Promise<(body?: Buffer | AsyncIterable<Buffer>) => Promise<Reply>> {
  const answer = await batch(server.url, 'acme/game', 'tok', 'upload', [{ oid: b.oid, size: b.size }]);
  const action = answer.json().objects[0].actions.upload;
  return (body = b.data) => http('PUT', action.href, { headers: { ...auth, 'content-type': 'application/octet-stream', ...(action.header ?? {}) }, body });
}

const download = (server: RunningServer, b: Blob): Promise<Reply> => http('GET', `${server.url}/acme/game/objects/${b.oid}`, { headers: auth });

/** A 503 with Retry-After and the Git LFS error body. */
function assertUnavailable(t: Test, res: Reply, what: string): void {
  t.equal(res.status, 503, `${what}: 503`);
  t.ok(Number(res.headers['retry-after']) > 0, `${what}: with Retry-After`);
  t.type(res.json().message, 'string', `${what}: the Git LFS error body`);
}

/** `request`, with the time it took as a comment; rejects if it is still unanswered at the test's cap. */
async function answered<T>(t: Test, what: string, request: Promise<T>): Promise<T> {
  const started = Date.now();
  const r = await capped(request, `an answer to ${what}`);
  t.comment(`${what}: answered after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return r;
}

function openUploads(): string[] {
  return existsSync(uploadsDir) ? readdirSync(uploadsDir) : [];
}

async function setMode(t: Test, mode: FaultProxy['mode']): Promise<void> {
  proxy.setMode(mode);
  t.teardown(() => proxy.setMode('pass'));
}

t.test('a silent bucket: 503 + Retry-After within the deadline, then served again without a restart', async (t) => {
  const server = await node(t, { SVC_S3_DEADLINE: '2' });
  const kept = blob(64 << 10);
  t.equal(await push(server.url, 'acme/game', 'tok', kept), 200, 'acknowledged before the fault');
  const fresh = blob(64 << 10);
  const put = await uploadAction(server, fresh);

  await setMode(t, 'silent');
  const [up, down, ready] = await Promise.all([
    answered(t, 'PUT', put()),
    answered(t, 'GET', download(server, kept)),
    answered(t, '/ready', http('GET', `${server.url}/ready`)),
  ]);
  assertUnavailable(t, up, 'an upload');
  assertUnavailable(t, down, 'a download');
  t.equal(ready.status, 503, '/ready fails');

  proxy.setMode('pass');
  t.equal((await answered(t, 'the PUT again', put())).status, 200, 'the upload goes through once the bucket answers');
  const after = await download(server, kept);
  t.equal(after.status, 200, 'what was acknowledged before downloads');
  t.ok(after.body.equals(kept.data), 'intact');
  t.equal((await download(server, fresh)).body.equals(fresh.data), true, 'and so does the upload made after');
  t.equal((await http('GET', `${server.url}/ready`)).status, 200, '/ready again');
});

t.test('a multipart upload given up on a silent bucket is aborted once the bucket answers', async (t) => {
  const server = await node(t, { SVC_S3_DEADLINE: '2' });
  const big = blob((9 << 20) + 123);
  const put = await uploadAction(server, big);
  const head = big.data.subarray(0, (8 << 20) + (512 << 10));
  let sendRest!: () => void;
  const rest = new Promise<void>((resolve) => (sendRest = resolve));
  async function* body(): AsyncIterable<Buffer> {
    yield head;
    await rest;
    yield big.data.subarray(head.length);
  }
  const reply = put(body());
  // The first part is in the bucket: the multipart upload exists.
  await waitFor(() => openUploads().some((id) => existsSync(join(uploadsDir, id, '1.md5'))), 'the first part in the bucket');
  await setMode(t, 'silent');
  sendRest();
  assertUnavailable(t, await answered(t, 'the multipart PUT', reply), 'a multipart upload');
  t.not(openUploads().length, 0, 'its multipart upload could not be aborted while the bucket is silent');
  proxy.setMode('pass');
  await waitFor(() => openUploads().length === 0, 'the given-up multipart upload aborted');
  t.pass('aborted once the bucket answers again');
  t.equal((await answered(t, 'the PUT again', put())).status, 200, 'the upload sent again goes through');
  const got = await download(server, big);
  t.ok(got.body.equals(big.data), 'and downloads intact');
});

t.test('a bucket resetting every connection: 503 + Retry-After, then served again', async (t) => {
  const server = await node(t, { SVC_S3_DEADLINE: '2' });
  const b = blob(32 << 10);
  const put = await uploadAction(server, b);
  await setMode(t, 'reset');
  assertUnavailable(t, await answered(t, 'PUT', put()), 'an upload');
  proxy.setMode('pass');
  t.equal((await put()).status, 200, 'goes through once the bucket answers');
  t.ok((await download(server, b)).body.equals(b.data), 'and downloads intact');
});

t.test('a slow bucket that keeps making progress is served whole', async (t) => {
  // The default deadlines: an answer that comes in pieces 3 s apart is slow, not silent.
  const server = await node(t, {});
  const b = blob(96 << 10);
  t.equal(await push(server.url, 'acme/game', 'tok', b), 200, 'uploaded');
  await setMode(t, 'slow');
  const res = await answered(t, 'a download from a slow bucket', download(server, b));
  t.equal(res.status, 200, 'downloads');
  t.ok(res.body.equals(b.data), 'whole and intact');
  const c = blob(16 << 10);
  t.equal(await answered(t, 'an upload to a slow bucket', push(server.url, 'acme/game', 'tok', c)), 200, 'an upload to it goes through too');
});

import { channel } from 'node:diagnostics_channel';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { loadAwsCredentials } from '../../src/config/load.js';
import { isLfsError } from '../../src/errors/errors.js';
import { parseOid } from '../../src/protocol/oid.js';
import { CredentialsCache } from '../../src/store/s3/credentials/credentials-cache.js';
import { credentialChain } from '../../src/store/s3/credentials/source-chain.js';
import { S3Client, S3ResponseError } from '../../src/store/s3/s3-client.js';
import { S3BlobStore } from '../../src/store/s3/s3-store.js';
import { issued, startImds, type StandIn } from '../helpers/aws-stand-ins.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, batch, blob, http } from '../helpers/lfs-http.js';
import { S3_ACCESS_KEY, S3_SECRET_KEY, startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';
import { cappedHeld } from '../helpers/wait-for.js';

// Renewal of short-lived credentials, and S3 requests signed with credentials from the instance
// metadata stand-in (test/helpers/aws-stand-ins.ts) reaching the S3-protocol test server, which
// checks SigV4 signatures. Tests wait for events (a request the stand-in counted, a log line the
// cache wrote), never for a clock.
const root = tmpDir('stowage-s3-creds-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const s3 = await startS3Server(join(root, 's3'));
t.teardown(() => s3.stop());

/** The cache's log lines, with a wait for the n-th line of a message. */
class LogProbe {
  readonly lines: { msg: string; fields: Record<string, unknown> }[] = [];
  readonly #waiters = new Set<() => void>();
  readonly log = (msg: string, fields: object = {}): void => {
    this.lines.push({ msg, fields: fields as Record<string, unknown> });
    for (const w of this.#waiters) w();
  };
  count(msg: RegExp): number {
    return this.lines.filter((l) => msg.test(l.msg)).length;
  }
  async waitFor(msg: RegExp, n = 1): Promise<void> {
    let waiter = (): void => undefined;
    const seen = new Promise<void>((resolve) => {
      waiter = () => this.count(msg) >= n && resolve();
      this.#waiters.add(waiter);
      waiter();
    });
    await cappedHeld(seen, `log line ${msg}`).finally(() => this.#waiters.delete(waiter));
  }
}

async function imdsStandIn(): Promise<StandIn> {
  const imds = await startImds();
  t.teardown(() => imds.close());
  return imds;
}

/** A cache over the whole chain with only instance metadata set up (pointed at the stand-in). */
function imdsCache(imds: StandIn, probe = new LogProbe()): { cache: CredentialsCache; probe: LogProbe } {
  const config = loadAwsCredentials({ AWS_EC2_METADATA_SERVICE_ENDPOINT: imds.url }, 'us-east-1');
  const cache = new CredentialsCache(credentialChain(config), { log: probe.log });
  t.teardown(() => cache.close());
  return { cache, probe };
}

t.test('renewed ahead of expiry by the cache itself, with no request asking', async (t) => {
  const imds = await imdsStandIn();
  // A 3 s life: renewal is due at half of it. The renewed ones live an hour.
  imds.issue = (n) => issued(n, n === 1 ? 3000 : 3600_000);
  const { cache, probe } = imdsCache(imds);
  t.equal((await cache.current()).accessKeyId, imds.given(1).accessKeyId);
  await imds.waitForCount(2); // the renewal event
  await probe.waitFor(/^S3 credentials loaded$/, 2);
  const now = await cache.current();
  t.equal(now.accessKeyId, imds.given(2).accessKeyId, 'new credentials in use');
  t.equal(now.sessionToken, imds.given(2).token);
  t.equal(imds.count, 2, 'the hour-long ones are not renewed again yet');
  t.same(probe.lines.map((l) => l.fields.source), ['instance metadata', 'instance metadata']);
  t.notOk(JSON.stringify(probe.lines).includes('secret-') || JSON.stringify(probe.lines).includes('session-token'), 'no secret or token logged');
});

t.test('one load in flight at a time', async (t) => {
  const imds = await imdsStandIn();
  const { cache } = imdsCache(imds);
  const got = await Promise.all([cache.current(), cache.current(), cache.refresh(), cache.current()]);
  t.equal(imds.count, 1, 'four callers, one request');
  t.ok(got.every((c) => c === got[0]));
  await Promise.all([cache.refresh(), cache.refresh()]);
  t.equal(imds.count, 2);
  await cache.current();
  t.equal(imds.count, 2, 'held credentials: no request');
});

t.test('a failed renewal keeps the old credentials until they expire, said once', async (t) => {
  const imds = await imdsStandIn();
  const { cache, probe } = imdsCache(imds);
  const first = await cache.current();
  imds.issue = () => ({ status: 500 });
  await t.rejects(cache.refresh(), /instance metadata: the credentials of role stowage-node answered 500/);
  await t.rejects(cache.refresh());
  t.equal(imds.count, 3, 'two failed renewals reached the endpoint');
  t.equal(await cache.current(), first, 'old credentials still used');
  t.equal(cache.held(), first, 'and for presigned links');
  t.equal(probe.count(/could not be renewed/), 1, 'logged once');
  t.equal(probe.lines.find((l) => /could not be renewed/.test(l.msg))!.fields.level, 'warn');
  imds.issue = (n) => issued(n, 3600_000);
  const fresh = await cache.refresh();
  t.equal(fresh.accessKeyId, imds.given(4).accessKeyId);
  t.equal(probe.count(/renewed after failures/), 1, 'recovery logged');
});

t.test('expired and the endpoint unreachable: a storage fault (503 + Retry-After), never a 500', async (t) => {
  const imds = await imdsStandIn();
  imds.issue = (n) => issued(n, 2000);
  const { cache, probe } = imdsCache(imds);
  await cache.current();
  await imds.close(); // connection refused from now on
  await probe.waitFor(/^S3 credentials expired/); // the cache's own expiry event, after its renewal failed
  const e = await cache.current().catch((err: unknown) => err);
  t.ok(isLfsError(e), 'an LfsError');
  t.match(e, { code: 'LFS_ERR_NOT_READY', status: 503, headers: { 'Retry-After': '10' } });
  t.throws(() => cache.held(), { code: 'LFS_ERR_NOT_READY', status: 503 });
  const client = new S3Client({ endpoint: s3.endpoint, bucket: s3.bucket, region: 'us-east-1', pathStyle: true, credentials: cache });
  t.teardown(() => client.close());
  await t.rejects(client.send({ method: 'HEAD', key: 'lfs/anything', accept: [404] }), { code: 'LFS_ERR_NOT_READY', status: 503 }, 'a bucket request fails as a storage fault');
  t.equal(probe.count(/^S3 credentials expired/), 1);
});

t.test('S3 requests signed with instance-metadata credentials reach the S3 server', async (t) => {
  const imds = await imdsStandIn();
  // s3rver's one account; the session token is ours. 20 minutes of life.
  imds.issue = () => ({ accessKeyId: S3_ACCESS_KEY, secretAccessKey: S3_SECRET_KEY, token: 'session-token-imds', expiration: new Date(Date.now() + 1200_000) });
  const { cache } = imdsCache(imds);
  const client = new S3Client({ endpoint: s3.endpoint, bucket: s3.bucket, region: 'us-east-1', pathStyle: true, credentials: cache });
  t.teardown(() => client.close());
  // Every request as undici sends it (its diagnostics channel), to see the headers that left.
  const sent: string[][] = [];
  const created = channel('undici:request:create');
  const onRequest = (m: unknown): void => {
    const r = (m as { request: { origin: string; headers: string[] | string } }).request;
    if (String(r.origin) === s3.endpoint) sent.push(Array.isArray(r.headers) ? r.headers : r.headers.split('\r\n'));
  };
  created.subscribe(onRequest);
  t.teardown(() => created.unsubscribe(onRequest));

  const put = await client.send({ method: 'PUT', key: 'lfs/creds/probe', body: Buffer.from('hello'), headers: { 'content-length': '5' } });
  put.body.resume();
  const got = await client.sendText({ method: 'GET', key: 'lfs/creds/probe' });
  t.equal(got.text, 'hello', 's3rver verified the signature and served the object');
  const flat = sent.map((h) => h.join('\n').toLowerCase());
  t.ok(flat.length >= 2 && flat.every((h) => h.includes('x-amz-security-token\nsession-token-imds') || h.includes('x-amz-security-token: session-token-imds')), 'the session token went with every request');
  t.ok(flat.every((h) => /credential=s3rver\/\d{8}\/us-east-1\/s3\/aws4_request/.test(h) && /signedheaders=[^,]*x-amz-security-token/.test(h)), 'signed with the key id from IMDS, the token among the signed headers');

  // Presigned: the link carries the token and lives no longer than the credentials (20 min).
  const link = client.presign('GET', 'lfs/creds/probe', 3600);
  t.ok(link.expiresIn <= 1200 && link.expiresIn > 1100, `capped at the credentials' life (${link.expiresIn} s)`);
  const q = new URL(link.href).searchParams;
  t.equal(q.get('X-Amz-Security-Token'), 'session-token-imds');
  t.equal(q.get('X-Amz-Expires'), String(link.expiresIn));
  const res = await fetch(link.href);
  t.equal(res.status, 200, 's3rver accepts the presigned link');
  t.equal(await res.text(), 'hello');
  const store = S3BlobStore.open({ endpoint: s3.endpoint, bucket: s3.bucket, region: 'us-east-1', pathStyle: true, credentials: cache, prefix: 'lfs/' });
  const signed = store.presigner.presignDownload(parseOid('a'.repeat(64))!, 7 * 86400);
  t.ok(signed.expiresIn <= 1200, 'the store reports the capped life to the batch');

  // A wrong secret from the endpoint: the S3 server refuses the signature.
  const wrong = await imdsStandIn();
  wrong.issue = () => ({ accessKeyId: S3_ACCESS_KEY, secretAccessKey: 'not-the-secret', token: 't', expiration: new Date(Date.now() + 1200_000) });
  const refused = new S3Client({ endpoint: s3.endpoint, bucket: s3.bucket, region: 'us-east-1', pathStyle: true, credentials: imdsCache(wrong).cache });
  t.teardown(() => refused.close());
  const err = await refused.send({ method: 'GET', key: 'lfs/creds/probe' }).catch((e: unknown) => e);
  t.type(err, S3ResponseError);
  t.equal((err as S3ResponseError).status, 403);
});

t.test('the bucket says the token expired early: new credentials are loaded, the request answers 503', async (t) => {
  const imds = await imdsStandIn();
  const { cache } = imdsCache(imds);
  // An S3 endpoint that refuses with ExpiredToken (as AWS does for a revoked or expired session).
  const bucket = createServer((_req, res) => {
    res.writeHead(400, { 'content-type': 'application/xml' });
    res.end('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>');
  });
  await new Promise<void>((resolve) => bucket.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => bucket.close(() => resolve())));
  const client = new S3Client({ endpoint: `http://127.0.0.1:${(bucket.address() as AddressInfo).port}`, bucket: 'b-1', region: 'us-east-1', pathStyle: true, credentials: cache });
  t.teardown(() => client.close());
  await t.rejects(client.send({ method: 'GET', key: 'k' }), { code: 'LFS_ERR_NOT_READY', status: 503 });
  await imds.waitForCount(2); // the reload the refusal started
  t.equal((await cache.current()).accessKeyId, imds.given(2).accessKeyId);
});

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok-dev', { login: 'dev', repos: { 'acme/game': 'push' } });

/** A server on the S3 test server with no AWS keys set, only the instance metadata stand-in (s3rver's account, `token`, `lifeMs`). */
async function serverOnImds(token: string, lifeMs: number, extra: Record<string, string> = {}): Promise<{ server: RunningServer; imds: StandIn }> {
  const imds = await imdsStandIn();
  imds.issue = () => ({ accessKeyId: S3_ACCESS_KEY, secretAccessKey: S3_SECRET_KEY, token, expiration: new Date(Date.now() + lifeMs) });
  const { AWS_ACCESS_KEY_ID: _id, AWS_SECRET_ACCESS_KEY: _secret, ...env } = s3.env(extra);
  const server = await startServer({ ...env, SVC_FORGE_A_API_URL: forge.url, AWS_EC2_METADATA_SERVICE_ENDPOINT: imds.url });
  t.teardown(() => server.stop());
  return { server, imds };
}

t.test('a server with no keys takes its credentials from instance metadata', async (t) => {
  const { server } = await serverOnImds('session-token-server', 1200_000, { SVC_S3_PRESIGN: 'true', SVC_S3_PRESIGN_TTL: '1h' });
  const loaded = await server.waitForLog((e) => e.msg === 'S3 credentials loaded', 'credentials loaded');
  t.equal(loaded.source, 'instance metadata');
  const b = blob(3000);
  // As git-lfs does for an authenticated object: no credentials on the links (docs/behaviour.md, "Object storage (S3)").
  const up = (await batch(server.url, 'acme/game', 'tok-dev', 'upload', [{ oid: b.oid, size: b.size }])).json().objects[0];
  t.equal(new URL(up.actions.upload.href).searchParams.get('X-Amz-Security-Token'), 'session-token-server', 'the upload link carries the session token');
  t.ok(up.actions.upload.expires_in <= 1200, `upload link capped too (${up.actions.upload.expires_in} s)`);
  t.equal((await http('PUT', up.actions.upload.href, { headers: { 'content-type': 'application/octet-stream' }, body: b.data })).status, 200, 'PUT straight to the bucket, signed with IMDS credentials');
  const verified = await http('POST', up.actions.verify.href, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: b.oid, size: b.size }) });
  t.equal(verified.status, 200, 'verify promoted it (server-side S3 calls signed with the same credentials)');
  const down = (await batch(server.url, 'acme/game', 'tok-dev', 'download', [{ oid: b.oid, size: b.size }])).json();
  const action = down.objects[0].actions.download;
  t.ok(action.expires_in <= 1200 && action.expires_in > 0, `the link lives no longer than the credentials (${action.expires_in} s of SVC_S3_PRESIGN_TTL=1h)`);
  t.equal(new URL(action.href).searchParams.get('X-Amz-Security-Token'), 'session-token-server');
  const res = await fetch(action.href);
  t.equal(Buffer.from(await res.arrayBuffer()).equals(b.data), true, 'downloaded from the bucket with the presigned link');
  t.notOk(server.logs.join('\n').includes('session-token-server'), 'the session token is never logged');
});

t.test('a server whose credentials expired and cannot be renewed answers 503 with Retry-After, not 500', async (t) => {
  const { server, imds } = await serverOnImds('short-lived', 3000);
  await server.waitForLog((e) => e.msg === 'S3 credentials loaded', 'credentials loaded');
  await imds.close(); // the instance metadata service is gone
  await server.waitForLog((e) => e.msg.startsWith('S3 credentials expired'), 'credentials expired');
  const b = blob(2000);
  const up = (await batch(server.url, 'acme/game', 'tok-dev', 'upload', [{ oid: b.oid, size: b.size }])).json().objects[0];
  const put = await http('PUT', up.actions.upload.href, { headers: { authorization: basic('tok-dev'), 'content-type': 'application/octet-stream' }, body: b.data });
  t.equal(put.status, 503, 'the upload is a storage fault');
  t.equal(put.headers['retry-after'], '10');
  t.equal(put.headers['content-type'], LFS);
  t.match(put.json(), { message: /object store cannot be used right now: its credentials could not be obtained/, request_id: String });
  t.equal((await http('GET', `${server.url}/ready`)).status, 503, '/ready says so');
  t.notOk(server.logs.join('\n').includes('short-lived'), 'the session token is never logged');
});

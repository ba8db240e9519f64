import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, batch, blob, http, push, schemaErrors } from '../helpers/lfs-http.js';
import { startS3Server, type S3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// SVC_STORE=s3 against a real S3-protocol server on loopback that checks SigV4 signatures
// (test/helpers/s3-server.ts), with the real server process and SQLite index.
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.repos.set('acme/signed', { private: true });
forge.tokens.set('tok-dev', { login: 'dev', repos: { 'acme/game': 'push', 'acme/signed': 'push' } });

const root = tmpDir('stowage-s3-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
let s3: S3Server = await startS3Server(join(root, 's3'));
t.teardown(() => s3.stop());
const s3Port = s3.port;

const proxy = await startServer({ ...s3.env(), SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: 'true' });
t.teardown(() => proxy.stop());
const signed = await startServer({ ...s3.env({ SVC_S3_PRESIGN: 'true', SVC_S3_PRESIGN_TTL: '15m' }), SVC_FORGE_A_API_URL: forge.url });
t.teardown(() => signed.stop());

const auth = { authorization: basic('tok-dev') };
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Every file s3rver holds for a key under the bucket (its on-disk layout keeps the key as a path). */
function bucketFiles(): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else out.push(join(d, e.name).slice(s3.dir.length));
    }
  };
  if (existsSync(s3.dir)) walk(s3.dir);
  return out;
}

t.test('ready checks the bucket is reachable and writable', async (t) => {
  const r = await http('GET', `${proxy.url}/ready`);
  t.equal(r.status, 200);
});

const small = blob(1000);
const medium = blob(20 * 1024 * 1024 + 12345); // three multipart parts of 8 MiB

t.test('proxy mode: upload, download and Range reads through the server', async (t) => {
  t.equal(await push(proxy.url, 'acme/game', 'tok-dev', small), 200, 'small object (single PUT)');
  t.equal(await push(proxy.url, 'acme/game', 'tok-dev', medium), 200, 'medium object (multipart)');
  t.ok(bucketFiles().some((f) => f.includes(`lfs/objects/${medium.oid.slice(0, 2)}/${medium.oid.slice(2, 4)}/${medium.oid}`)), 'stored under the content-addressed key');

  const b = (await batch(proxy.url, 'acme/game', 'tok-dev', 'download', [{ oid: medium.oid, size: medium.size }])).json();
  t.equal(schemaErrors('http-batch-response-schema.json', b), null);
  t.equal(b.objects[0].actions.download.href, `${proxy.url}/acme/game/objects/${medium.oid}`, 'link back to this server');
  t.not(b.objects[0].authenticated, true, 'not authenticated');

  const full = await http('GET', `${proxy.url}/acme/game/objects/${medium.oid}`, { headers: auth });
  t.equal(full.status, 200);
  t.equal(sha(full.body), medium.oid, 'whole object intact');
  const tiny = await http('GET', `${proxy.url}/acme/game/objects/${small.oid}`, { headers: auth });
  t.ok(tiny.body.equals(small.data), 'small object intact');

  // A range across a part boundary, an open-ended one and a suffix one: ranged GETs to the bucket.
  const a = 8 * 1024 * 1024 - 100;
  const r1 = await http('GET', `${proxy.url}/acme/game/objects/${medium.oid}`, { headers: { ...auth, range: `bytes=${a}-${a + 299}` } });
  t.equal(r1.status, 206);
  t.equal(r1.headers['content-range'], `bytes ${a}-${a + 299}/${medium.size}`);
  t.ok(r1.body.equals(medium.data.subarray(a, a + 300)), 'range across a part boundary');
  const r2 = await http('GET', `${proxy.url}/acme/game/objects/${medium.oid}`, { headers: { ...auth, range: `bytes=${medium.size - 10}-` } });
  t.ok(r2.body.equals(medium.data.subarray(medium.size - 10)), 'open-ended range');
  const r3 = await http('GET', `${proxy.url}/acme/game/objects/${medium.oid}`, { headers: { ...auth, range: 'bytes=-5' } });
  t.ok(r3.body.equals(medium.data.subarray(medium.size - 5)), 'suffix range');
  const r4 = await http('GET', `${proxy.url}/acme/game/objects/${medium.oid}`, { headers: { ...auth, range: `bytes=${medium.size}-` } });
  t.equal(r4.status, 416, 'unsatisfiable range');
});

t.test('proxy mode: wrong bytes are refused and leave nothing in the bucket', async (t) => {
  const good = blob(9 * 1024 * 1024); // over one part: the multipart upload must be aborted
  const bad = Buffer.from(good.data);
  bad[5] ^= 1;
  const before = new Set(bucketFiles());
  const r = await http('PUT', `${proxy.url}/acme/game/objects/${good.oid}`, { headers: { ...auth, 'content-type': 'application/octet-stream' }, body: bad });
  t.equal(r.status, 422);
  t.equal(r.json().message.includes('hashes to'), true);
  const b = (await batch(proxy.url, 'acme/game', 'tok-dev', 'download', [{ oid: good.oid, size: good.size }])).json();
  t.equal(b.objects[0].error.code, 404, 'not visible');
  t.notOk(bucketFiles().some((f) => f.includes(good.oid)), 'no key, no part left for that oid');
  // s3rver does not implement AbortMultipartUpload (DELETE ?uploadId falls through to a plain delete),
  // so the aborted upload's invisible parts stay in its private uploads folder; no object or key appears.
  t.same(bucketFiles().filter((f) => !before.has(f) && !f.includes('/._S3rver_uploads/')), [], 'no object added to the bucket');
});

t.test('the S3 server really checks signatures', async (t) => {
  const b = (await batch(signed.url, 'acme/game', 'tok-dev', 'download', [{ oid: small.oid, size: small.size }])).json();
  // acme/game's objects were recorded by the proxy server's index, not this one: 404 here.
  t.equal(b.objects[0].error.code, 404, 'presence is per server index and repository');
  const s = blob(2000);
  const up = (await batch(signed.url, 'acme/signed', 'tok-dev', 'upload', [{ oid: s.oid, size: s.size }])).json();
  const href: string = up.objects[0].actions.upload.href;
  const tampered = href.replace(/X-Amz-Signature=([0-9a-f])/, (_m, c: string) => `X-Amz-Signature=${c === '0' ? '1' : '0'}`);
  const r = await http('PUT', tampered, { body: s.data });
  t.equal(r.status, 403, 'tampered signature: 403 SignatureDoesNotMatch');
  t.match(r.body.toString(), /SignatureDoesNotMatch/);
  const other = href.replace(s.oid, small.oid);
  t.equal((await http('PUT', other, { body: small.data })).status, 403, 'a link for one key cannot write another');
});

t.test('presign mode: links go to the bucket, verify promotes after checking the digest', async (t) => {
  const o = blob(300_000);
  const res = await batch(signed.url, 'acme/signed', 'tok-dev', 'upload', [{ oid: o.oid, size: o.size }]);
  t.equal(res.status, 200);
  const body = res.json();
  t.equal(schemaErrors('http-batch-response-schema.json', body), null, 'official schema');
  const obj = body.objects[0];
  t.equal(obj.authenticated, true, 'authenticated for signed URLs');
  t.ok(obj.actions.upload.href.startsWith(`${s3.endpoint}/${s3.bucket}/lfs/incoming/`), 'upload goes to the per-repository landing key');
  t.match(obj.actions.upload.href, /X-Amz-Signature=/);
  t.notOk(obj.actions.upload.header?.Authorization ?? obj.actions.upload.header?.authorization, 'no Authorization header');
  t.ok(Number.isInteger(obj.actions.upload.expires_in) && obj.actions.upload.expires_in >= 900, 'expires_in integer, at least the TTL');
  t.ok(obj.actions.verify.href.startsWith(`${signed.url}/acme/signed/objects/verify?`), 'verify comes back here, signed');

  // Before verify, the object is not visible.
  t.equal((await http('PUT', obj.actions.upload.href, { headers: { 'content-type': 'application/octet-stream' }, body: o.data })).status, 200, 'PUT straight to the bucket');
  let d = (await batch(signed.url, 'acme/signed', 'tok-dev', 'download', [{ oid: o.oid, size: o.size }])).json();
  t.equal(d.objects[0].error?.code, 404, 'not visible before verify');

  // The client sends no credentials to an authenticated object's verify (docs/behaviour.md, "Object storage (S3)"): the link's signature is the credential.
  const forged = obj.actions.verify.href.replace(/signature=([0-9a-f])/, (_m: string, c: string) => `signature=${c === '0' ? '1' : '0'}`);
  const bad = await http('POST', forged, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: o.oid, size: o.size }) });
  t.equal(bad.status, 403, 'forged verify signature: 403, never 401 (a 401 loops the client)');
  const noCreds = await http('POST', `${signed.url}/acme/signed/objects/verify`, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: o.oid, size: o.size }) });
  t.equal(noCreds.status, 401, 'unsigned verify still needs credentials');
  const v = await http('POST', obj.actions.verify.href, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: o.oid, size: o.size }) });
  t.equal(v.status, 200, 'verify promotes');
  t.notOk(bucketFiles().some((f) => f.includes('incoming') && f.includes(o.oid)), 'landing key removed');

  d = (await batch(signed.url, 'acme/signed', 'tok-dev', 'download', [{ oid: o.oid, size: o.size }])).json();
  t.equal(schemaErrors('http-batch-response-schema.json', d), null);
  t.equal(d.objects[0].authenticated, true);
  const get = await http('GET', d.objects[0].actions.download.href);
  t.equal(get.status, 200, 'presigned GET without credentials');
  t.equal(sha(get.body), o.oid, 'bytes intact');
  const part = await http('GET', d.objects[0].actions.download.href, { headers: { range: 'bytes=1000-1999' } });
  t.equal(part.status, 206, 'Range on a presigned GET');
  t.ok(part.body.equals(o.data.subarray(1000, 2000)));
  t.equal((await http('GET', `${signed.url}/acme/signed/objects/${o.oid}`, { headers: auth })).status, 200, 'also readable through the server');

  const again = (await batch(signed.url, 'acme/signed', 'tok-dev', 'upload', [{ oid: o.oid, size: o.size }])).json();
  t.notOk(again.objects[0].actions, 'present now: no actions');
});

t.test('presign mode: a presigned upload with wrong bytes never becomes visible', async (t) => {
  const o = blob(50_000);
  const obj = (await batch(signed.url, 'acme/signed', 'tok-dev', 'upload', [{ oid: o.oid, size: o.size }])).json().objects[0];
  const wrong = Buffer.from(o.data);
  wrong[100] ^= 0xff; // same size, other bytes
  t.equal((await http('PUT', obj.actions.upload.href, { body: wrong })).status, 200, 'the bucket takes any bytes (no checksum enforcement here)');
  const v = await http('POST', obj.actions.verify.href, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: o.oid, size: o.size }) });
  t.equal(v.status, 422, 'verify refuses it');
  t.match(v.json().message, /hashes to/);
  t.notOk(bucketFiles().some((f) => f.includes(o.oid)), 'nothing promoted, landing and staging copies deleted');
  const d = (await batch(signed.url, 'acme/signed', 'tok-dev', 'download', [{ oid: o.oid, size: o.size }])).json();
  t.equal(d.objects[0].error?.code, 404, 'not visible');
  const v2 = await http('POST', obj.actions.verify.href, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: o.oid, size: o.size }) });
  t.equal(v2.status, 404, 'a second verify finds nothing');
  // Wrong size is refused too.
  t.equal((await http('PUT', obj.actions.upload.href, { body: o.data.subarray(1) })).status, 200);
  const v3 = await http('POST', obj.actions.verify.href, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: o.oid, size: o.size }) });
  t.equal(v3.status, 422, 'short upload refused');
  // And the right bytes then go through.
  t.equal((await http('PUT', obj.actions.upload.href, { body: o.data })).status, 200);
  const v4 = await http('POST', obj.actions.verify.href, { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: o.oid, size: o.size }) });
  t.equal(v4.status, 200, 'right bytes promoted');
});

t.test('presign mode: objects over 5 GiB are proxied through the server', async (t) => {
  const oid = 'a'.repeat(64);
  const size = 5 * 1024 ** 3 + 1;
  const obj = (await batch(signed.url, 'acme/signed', 'tok-dev', 'upload', [{ oid, size }])).json().objects[0];
  t.not(obj.authenticated, true, 'a link back here is not authenticated');
  t.equal(obj.actions.upload.href, `${signed.url}/acme/signed/objects/${oid}`);
  t.notOk(obj.actions.verify, 'proxied: the PUT verifies, no verify action');
});

t.test('SVC_COMPRESSION on the bucket: frames stored, decoded on reads; presign falls back to the server', async (t) => {
  const comp = await startServer({ ...s3.env({ SVC_S3_PRESIGN: 'true' }), SVC_COMPRESSION: 'zstd', SVC_FORGE_A_API_URL: forge.url });
  t.teardown(() => comp.stop());
  const text = Buffer.from(Array.from({ length: 300_000 }, (_, i) => `line ${i} of a compressible text asset\n`).join(''));
  const compressible = { data: text, oid: sha(text), size: text.length }; // ~11 MiB: 3 frames, 2 parts
  const random = blob(5 * 1024 * 1024 + 7); // incompressible: every frame stays raw
  const hex = Buffer.from(blob(24 * 1024 * 1024).data.toString('hex')); // 48 MiB, about half compressible
  const halfway = { data: hex, oid: sha(hex), size: hex.length }; // frames ~26 MiB: several parts in flight
  const tiny = blob(100); // below the framing threshold

  for (const o of [compressible, random, halfway]) {
    const up = (await batch(comp.url, 'acme/game', 'tok-dev', 'upload', [{ oid: o.oid, size: o.size }])).json().objects[0];
    t.not(up.authenticated, true, 'objects the server compresses are not presigned');
    t.equal(up.actions.upload.href, `${comp.url}/acme/game/objects/${o.oid}`, 'upload proxied through the server');
    t.equal(await push(comp.url, 'acme/game', 'tok-dev', o), 200);
  }
  const tinyUp = (await batch(comp.url, 'acme/game', 'tok-dev', 'upload', [{ oid: tiny.oid, size: tiny.size }])).json().objects[0];
  t.equal(tinyUp.authenticated, true, 'an object too small to frame is still presigned');

  const stored = (oid: string): number => statSync(join(s3.dir, s3.bucket, 'lfs', 'objects', oid.slice(0, 2), oid.slice(2, 4), `${oid}._S3rver_object`)).size;
  t.ok(stored(compressible.oid) < compressible.size / 4, `compressible object stored framed (${stored(compressible.oid)} of ${compressible.size} bytes)`);
  t.equal(stored(random.oid), random.size, 'incompressible object stored exactly as it arrived');

  const full = await http('GET', `${comp.url}/acme/game/objects/${compressible.oid}`, { headers: auth });
  t.equal(sha(full.body), compressible.oid, 'framed object decoded intact');
  t.ok(stored(halfway.oid) < halfway.size * 0.7 && stored(halfway.oid) > 3 * 8 * 1024 * 1024, `half-compressible object framed over several parts (${stored(halfway.oid)} bytes)`);
  const hv = await http('GET', `${comp.url}/acme/game/objects/${halfway.oid}`, { headers: auth });
  t.equal(sha(hv.body), halfway.oid, 'multipart framed object decoded intact');
  const a = 4 * 1024 * 1024 - 10; // across the first frame boundary
  const part = await http('GET', `${comp.url}/acme/game/objects/${compressible.oid}`, { headers: { ...auth, range: `bytes=${a}-${a + 99}` } });
  t.equal(part.status, 206);
  t.ok(part.body.equals(compressible.data.subarray(a, a + 100)), 'range across a frame boundary');

  const d = (await batch(comp.url, 'acme/game', 'tok-dev', 'download', [{ oid: compressible.oid, size: compressible.size }, { oid: random.oid, size: random.size }])).json();
  t.equal(d.objects[0].actions.download.href, `${comp.url}/acme/game/objects/${compressible.oid}`, 'a compressed object is downloaded through the server');
  t.not(d.objects[0].authenticated, true);
  t.equal(d.objects[1].authenticated, true, 'a plain one is presigned');
  const direct = await http('GET', d.objects[1].actions.download.href);
  t.equal(sha(direct.body), random.oid, 'presigned GET of the plain object');
});

t.test('multipart upload of a 1 GiB object with bounded memory', async (t) => {
  const size = 1024 ** 3 + 4321;
  const block = Buffer.alloc(4 << 20);
  for (let i = 0; i < block.length; i += 4) block.writeUInt32LE((i * 2654435761) >>> 0, i);
  function* chunks(): Generator<Buffer> {
    let sent = 0;
    let k = 0;
    while (sent < size) {
      const n = Math.min(block.length, size - sent);
      const c = Buffer.from(block.subarray(0, n));
      c.writeUInt32LE(k++, 0);
      sent += n;
      yield c;
    }
  }
  const h = createHash('sha256');
  for (const c of chunks()) h.update(c);
  const oid = h.digest('hex');
  const b = (await batch(proxy.url, 'acme/game', 'tok-dev', 'upload', [{ oid, size }])).json().objects[0];
  t.equal(b.actions.upload.header['Transfer-Encoding'], 'chunked');
  // A server that exits mid-upload fails the PUT below, with its log; the sampler must not throw first.
  const rss = (): number => {
    try {
      return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${proxy.child.pid}/status`, 'utf8'))?.[1] ?? 0);
    } catch {
      return 0;
    }
  };
  const baseline = rss();
  let peak = baseline;
  const sample = setInterval(() => {
    peak = Math.max(peak, rss());
  }, 100);
  const started = Date.now();
  const put = await http('PUT', b.actions.upload.href, {
    headers: { ...auth, 'content-type': 'application/octet-stream', 'x-lfs-object-size': String(size) },
    body: (async function* () {
      yield* chunks();
    })(),
  }).catch((e: unknown) => {
    t.comment(proxy.logs.slice(-10).join('\n'));
    throw e;
  });
  const upSeconds = (Date.now() - started) / 1000;
  clearInterval(sample);
  t.equal(put.status, 200, 'uploaded');
  const growth = (peak - baseline) / 1024;
  t.comment(`1 GiB through the server into the bucket: ${upSeconds.toFixed(1)} s; server RSS baseline ${(baseline / 1024).toFixed(0)} MiB, peak growth ${growth.toFixed(0)} MiB`);
  // Part buffers: at most (2 in flight + 1 filling) × 8 MiB, plus the HTTP clients' own buffers.
  t.ok(growth < 96, `server RSS growth ${growth.toFixed(0)} MiB stays bounded while 1 GiB moves`);
  const key = bucketFiles().find((f) => f.includes(`/${oid}`) && f.endsWith('object'));
  t.ok(key === undefined || statSync(join(s3.dir, key)).size === size, 'bucket holds the whole object');
  // Read it back through the server and hash it.
  const { request } = await import('undici');
  const res = await request(`${proxy.url}/acme/game/objects/${oid}`, { headers: auth });
  t.equal(res.statusCode, 200);
  const h2 = createHash('sha256');
  let n = 0;
  for await (const c of res.body) {
    h2.update(c as Buffer);
    n += (c as Buffer).length;
  }
  t.equal(n, size);
  t.equal(h2.digest('hex'), oid, 'downloaded bytes hash to the oid');
});

t.test('bucket outage: a clear 503, nothing lost', async (t) => {
  const during = blob(4000);
  // A presigned upload that reached the bucket just before the outage, verified during it.
  const pending = blob(3000);
  const pobj = (await batch(signed.url, 'acme/signed', 'tok-dev', 'upload', [{ oid: pending.oid, size: pending.size }])).json().objects[0];
  t.equal((await http('PUT', pobj.actions.upload.href, { body: pending.data })).status, 200);
  await s3.stop();
  const ready = await http('GET', `${proxy.url}/ready`);
  t.equal(ready.status, 503, '/ready fails');
  const put = await http('PUT', `${proxy.url}/acme/game/objects/${during.oid}`, { headers: { ...auth, 'content-type': 'application/octet-stream' }, body: during.data });
  t.equal(put.status, 503, 'upload answered 503');
  t.match(put.json().message, /object store cannot be reached/);
  t.ok(put.headers['retry-after'], 'with Retry-After');
  const get = await http('GET', `${proxy.url}/acme/game/objects/${small.oid}`, { headers: auth });
  t.equal(get.status, 503, 'download answered 503');
  const vb = (await batch(proxy.url, 'acme/game', 'tok-dev', 'upload', [{ oid: during.oid, size: during.size }])).json();
  t.ok(vb.objects[0].actions, 'the failed upload was not recorded');
  const verifyBody = { headers: { 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oid: pending.oid, size: pending.size }) };
  const pv = await http('POST', pobj.actions.verify.href, verifyBody);
  t.equal(pv.status, 503, 'verify of a presigned upload answered 503 (the client retries it)');
  // A server started while the bucket is down still starts; /ready tells the orchestrator.
  const late = await startServer({ ...s3.env({ SVC_S3_PRESIGN: 'true' }), SVC_FORGE_A_API_URL: forge.url });
  t.teardown(() => late.stop());
  const lr = await http('GET', `${late.url}/ready`);
  t.equal(lr.status, 503, 'a server started during the outage is not ready');
  t.match(lr.json().message, /Storage is not writable: The object store cannot be reached/);

  s3 = await startS3Server(s3.dir, s3Port);
  t.equal((await http('GET', `${proxy.url}/ready`)).status, 200, 'ready again');
  const back = await http('GET', `${proxy.url}/acme/game/objects/${medium.oid}`, { headers: auth });
  t.equal(back.status, 200);
  t.equal(sha(back.body), medium.oid, 'objects stored before the outage are intact');
  t.equal(await push(proxy.url, 'acme/game', 'tok-dev', during), 200, 'the retried upload succeeds');
  t.equal((await http('POST', pobj.actions.verify.href, verifyBody)).status, 200, 'the presigned upload was not lost: verify promotes it now');
  const pd = (await batch(signed.url, 'acme/signed', 'tok-dev', 'download', [{ oid: pending.oid, size: pending.size }])).json();
  t.ok((await http('GET', pd.objects[0].actions.download.href)).body.equals(pending.data), 'and it downloads intact');
  t.equal((await http('GET', `${late.url}/ready`)).status, 200, 'the late server is ready once the bucket is back');
  const got = await http('GET', `${proxy.url}/acme/game/objects/${during.oid}`, { headers: auth });
  t.ok(got.body.equals(during.data));
});

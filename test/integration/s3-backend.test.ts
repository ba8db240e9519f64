import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { isLfsError } from '../../src/errors/errors.js';
import { parseOid, type Oid } from '../../src/protocol/oid.js';
import { S3Bucket } from '../../src/store/s3/s3-bucket.js';
import { S3Client } from '../../src/store/s3/s3-client.js';
import { MAX_PRESIGNED_PUT, S3BlobStore, type S3StoreOptions } from '../../src/store/s3/s3-store.js';
import type { BlobReader, BlobStore, PutResult, WriterOptions } from '../../src/store/types.js';
import { s3rverCredentials, startS3Server } from '../helpers/s3-server.js';
import { drainChunks } from '../helpers/data.js';
import { tmpDir } from '../helpers/start-server.js';

// The S3 backend driven directly (no server, no layers) against a real S3-protocol server on
// loopback that checks SigV4 (test/helpers/s3-server.ts). Each test uses its own key prefix.
const root = tmpDir('stowage-s3-backend-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const s3 = await startS3Server(join(root, 's3'));
t.teardown(() => s3.stop());

const MiB = 1 << 20;
const location = {
  endpoint: s3.endpoint,
  bucket: s3.bucket,
  region: 'us-east-1',
  pathStyle: true,
  credentials: s3rverCredentials(),
};
const client = new S3Client(location);
t.teardown(() => client.close());
const bucket = new S3Bucket(client);

function openStore(prefix: string, extra: Partial<S3StoreOptions> = {}): S3BlobStore {
  const store = S3BlobStore.open({ ...location, prefix, ...extra });
  t.teardown(() => store.close());
  return store;
}

const sha = (b: Uint8Array): Oid => parseOid(createHash('sha256').update(b).digest('hex'))!;
/** An oid that is not the bytes' digest: the backend stores what it is given, it verifies nothing. */
const anyOid = (): Oid => parseOid(randomBytes(32).toString('hex'))!;

/** Writes `data` in 1 MiB chunks, honouring backpressure; counts the release calls the writer made. */
async function put(store: BlobStore, oid: Oid, data: Buffer, options: Partial<WriterOptions> = {}): Promise<PutResult & { released: number; chunks: number; paused: number }> {
  const w = await store.createWriter(oid, { expectedSize: data.length, ...options });
  let released = 0;
  let chunks = 0;
  let paused = 0;
  for (let at = 0; at < data.length; at += MiB) {
    chunks++;
    let inCall = true;
    const more = w.write(data.subarray(at, at + MiB), () => {
      if (inCall) released++;
    });
    inCall = false;
    if (!more) {
      paused++;
      await new Promise<void>((resolve) => w.onDrain(resolve));
    }
  }
  return { ...(await w.finish()), released, chunks, paused };
}

function readAll(reader: BlobReader, start = 0, end = reader.storedSize - 1): Promise<Buffer> {
  return drainChunks(reader.read(start, end));
}

/** The bytes of any key, straight from the bucket; null when absent. */
async function getKey(key: string): Promise<Buffer | null> {
  const r = await client.send({ method: 'GET', key, accept: [404] });
  const parts: Buffer[] = [];
  for await (const c of r.body as AsyncIterable<Buffer>) parts.push(c);
  return r.status === 404 ? null : Buffer.concat(parts);
}

async function putKey(key: string, body: Buffer): Promise<void> {
  const r = await client.send({ method: 'PUT', key, headers: { 'content-length': String(body.length) }, body });
  for await (const _ of r.body) void _;
}

async function uploadsUnder(prefix: string): Promise<string[]> {
  const keys: string[] = [];
  for await (const u of bucket.listUploads(prefix)) keys.push(u.key);
  return keys;
}

/** s3rver keeps a key as a file `<dir>/<bucket>/<key>._S3rver_object`; its mtime is the key's LastModified. */
const fileOf = (key: string): string => join(s3.dir, s3.bucket, `${key}._S3rver_object`);
/** The keys directly in a folder of the bucket, from s3rver's files. */
const keysIn = (folder: string): string[] =>
  readdirSync(join(s3.dir, s3.bucket, folder))
    .filter((n) => n.endsWith('._S3rver_object'))
    .map((n) => `${folder}/${n.slice(0, -'._S3rver_object'.length)}`);

t.test('round trip: single PUT and multipart, whole and ranged reads, stat', async (t) => {
  const store = openStore('rt/');
  t.equal(store.blockSize, MiB, 'blocks of 1 MiB');
  t.equal(store.legacy, null, 'no legacy layout in a bucket');
  const small = randomBytes(1000);
  const medium = randomBytes(20 * MiB + 12345); // three 8 MiB parts
  const empty = Buffer.alloc(0);
  for (const data of [small, medium, empty]) {
    const oid = sha(data);
    const r = await put(store, oid, data);
    t.same({ size: r.size, storedSize: r.storedSize, created: r.created }, { size: data.length, storedSize: data.length, created: true }, `${data.length} bytes stored as given`);
    t.equal(r.released, r.chunks, 'every chunk released during its write() call (copied into part buffers)');
    // Parts start at 8 and 16 MiB with no await between them, so the second one finds the first in flight.
    if (data === medium) t.ok(r.paused > 0, 'write() asked the caller to wait while two parts were uploading');
    t.same(await store.stat(oid), { size: data.length, storedSize: data.length, framed: false });
    const reader = (await store.open(oid))!;
    t.equal(reader.size, data.length);
    t.equal(reader.framed, false, 'no format metadata: plain');
    if (data.length > 0) t.ok((await readAll(reader)).equals(data), 'whole object intact');
    await reader.close();
    t.ok((await getKey(`rt/objects/${oid.slice(0, 2)}/${oid.slice(2, 4)}/${oid}`))?.equals(data), 'under objects/ab/cd/<oid>, bytes as given');
  }
  const reader = (await store.open(sha(medium)))!;
  const a = 8 * MiB - 100;
  t.ok((await readAll(reader, a, a + 299)).equals(medium.subarray(a, a + 300)), 'range across a part boundary');
  t.ok((await readAll(reader, medium.length - 10, medium.length - 1)).equals(medium.subarray(medium.length - 10)), 'last bytes');
  const absent = anyOid();
  t.equal(await store.open(absent), null);
  t.equal(await store.stat(absent), null);
  t.equal(await store.delete(absent), false);
  t.equal(await store.quarantine(absent), false);
});

t.test('without replace an existing copy is kept; with replace it is overwritten', async (t) => {
  const store = openStore('rep/');
  for (const size of [5000, 9 * MiB]) {
    const oid = anyOid();
    const first = randomBytes(size);
    const second = randomBytes(size);
    t.equal((await put(store, oid, first)).created, true);
    const kept = await put(store, oid, second);
    t.equal(kept.created, false, `${size} bytes: a second write keeps the stored copy`);
    t.ok((await readAll((await store.open(oid))!)).equals(first), 'the first bytes are still served');
    const replaced = await put(store, oid, second, { replace: true });
    t.equal(replaced.created, true, 'replace: the new copy is stored');
    t.ok((await readAll((await store.open(oid))!)).equals(second), 'the new bytes are served');
    t.same(await uploadsUnder('rep/'), [], 'no multipart upload left behind by the kept or the replacing write');
  }
});

t.test('abort leaves no key and no multipart upload', async (t) => {
  const store = openStore('ab/');
  for (const size of [3000, 17 * MiB]) {
    const oid = anyOid();
    const w = await store.createWriter(oid, { expectedSize: size + 100 });
    const data = randomBytes(size);
    for (let at = 0; at < size; at += MiB) if (!w.write(data.subarray(at, at + MiB))) await new Promise<void>((r) => w.onDrain(r));
    await w.abort();
    await w.abort(); // idempotent
    t.equal(await store.stat(oid), null, `${size} bytes aborted: no key`);
    t.same(await uploadsUnder('ab/'), [], 'no multipart upload');
    t.notOk(existsSync(fileOf(`ab/objects/${oid.slice(0, 2)}/${oid.slice(2, 4)}/${oid}`)), 'nothing in the bucket for that oid');
  }
  const before = await store.createWriter(anyOid(), { expectedSize: null });
  await before.abort();
  t.same(await uploadsUnder('ab/'), [], 'abort before any byte: nothing either');
});

t.test('list walks every page and yields only objects of the layout', async (t) => {
  const store = openStore('ls/', { listPageSize: 2 });
  const stored = new Map<string, number>();
  for (let i = 0; i < 5; i++) {
    const data = randomBytes(100 + i);
    const oid = sha(data);
    await put(store, oid, data);
    stored.set(oid, data.length);
  }
  // Keys in objects/ that are not `ab/cd/<oid>` with a matching shard: not objects of this store.
  const stray = anyOid();
  await putKey(`ls/objects/${stray.slice(0, 2)}/${stray.slice(2, 4)}/${stray}.tmp`, Buffer.from('x'));
  await putKey(`ls/objects/${stray.slice(0, 2)}/zz/${stray}`, Buffer.from('x'));
  await putKey(`ls/objects/00/00/${'f'.repeat(64)}`, Buffer.from('x'));
  await putKey(`ls/objects/readme`, Buffer.from('x'));
  const listed = new Map<string, number>();
  for await (const o of store.list()) listed.set(o.oid, o.storedSize);
  t.same(Object.fromEntries(listed), Object.fromEntries(stored), '5 objects over 5 pages of 2 keys, strays skipped');
  await store.delete([...stored.keys()][0] as Oid);
  let n = 0;
  for await (const _ of store.list()) n++;
  t.equal(n, 4, 'a deleted object is no longer listed (trash/ is not objects/)');
});

t.test('quarantine moves the key aside; the next write stores fresh bytes', async (t) => {
  const store = openStore('qu/');
  const good = randomBytes(6000);
  const oid = sha(good);
  const bad = Buffer.from(good);
  bad[10] ^= 1;
  await put(store, oid, bad, { framed: true });
  const reader = (await store.open(oid))!;
  t.equal(await store.quarantine(oid), true);
  t.equal(await store.stat(oid), null, 'gone from objects/');
  t.equal(await store.open(oid), null);
  const keys = keysIn('qu/quarantine');
  t.equal(keys.length, 1);
  const key = keys[0]!;
  t.match(key, new RegExp(`^qu/quarantine/${oid}\\.\\d{13}$`), 'quarantine/<oid>.<ms>');
  t.ok((await getKey(key))?.equals(bad), 'the bad bytes kept for inspection');
  t.equal((await bucket.head(key))?.framed, true, 'with their format metadata');
  t.ok((await readAll(reader)).equals(bad), 'a reader opened before still reads what it opened');
  const healed = await put(store, oid, good);
  t.equal(healed.created, true, 'the next write is not "already stored"');
  t.ok((await readAll((await store.open(oid))!)).equals(good));
});

t.test('a read never observes a later delete', async (t) => {
  // copyPartSize 5 MiB: the 12 MiB object goes to the trash by UploadPartCopy, the small one by CopyObject.
  const store = openStore('rd/', { copyPartSize: 5 * MiB });
  for (const data of [randomBytes(70_000), randomBytes(12 * MiB + 7)]) {
    const oid = sha(data);
    await put(store, oid, data);
    const opened = (await store.open(oid))!;
    const started = opened.read(0, data.length - 1);
    const first = Buffer.from((await started.next())!);
    t.equal(await store.delete(oid), true, `${data.length} bytes deleted`);
    t.equal(await store.stat(oid), null, 'the key is gone');
    t.equal(await store.open(oid), null, 'a new open finds nothing');
    t.ok((await readAll(opened)).equals(data), 'a reader opened before the delete reads the whole original object');
    const mid = Math.floor(data.length / 2);
    t.ok((await readAll(opened, mid, mid + 999)).equals(data.subarray(mid, mid + 1000)), 'and any range of it');
    const rest: Buffer[] = [first];
    for (let c = await started.next(); c !== null; c = await started.next()) rest.push(Buffer.from(c));
    t.ok(Buffer.concat(rest).equals(data), 'a read in progress across the delete completes');
    t.same(await uploadsUnder('rd/'), [], 'the part-by-part copy completed, no upload left');
    t.equal(await store.delete(oid), false, 'a second delete finds nothing');
  }
  // Once the trash copy is gone too (the sweep, hours later), the read fails cleanly with 404.
  const data = randomBytes(2000);
  const oid = sha(data);
  await put(store, oid, data);
  const opened = (await store.open(oid))!;
  await store.delete(oid);
  await client.send({ method: 'DELETE', key: `rd/trash/${oid.slice(0, 2)}/${oid.slice(2, 4)}/${oid}` });
  const err = await readAll(opened).then(() => null, (e: unknown) => e);
  t.ok(isLfsError(err) && err.status === 404, 'object removed: 404, not wrong bytes');
  // A trash copy of another version of the oid (its ETag differs) is not read either.
  await put(store, oid, data);
  const stale = (await store.open(oid))!;
  await store.delete(oid);
  await put(store, oid, randomBytes(2000));
  await store.delete(oid); // the trash now holds that other version
  const err2 = await readAll(stale).then(() => null, (e: unknown) => e);
  t.ok(isLfsError(err2) && err2.status === 404, 'another version in the trash: 404, not its bytes');
});

t.test('a read never observes a later replacement', async (t) => {
  const store = openStore('rr/');
  for (const size of [3000, 9 * MiB]) {
    const oid = anyOid();
    const before = randomBytes(size);
    const after = randomBytes(size); // same size: only the ETag tells the versions apart
    await put(store, oid, before);
    const opened = (await store.open(oid))!;
    await put(store, oid, after, { replace: true });
    t.ok((await readAll(opened)).equals(before), `${size} bytes: the reader keeps the version it opened (If-Match → 412 → trash)`);
    t.ok((await readAll((await store.open(oid))!)).equals(after), 'a new open reads the new version');
  }
});

t.test('concurrent writers of one oid: both finish, one copy, intact', async (t) => {
  const store = openStore('cc/');
  for (const size of [4000, 9 * MiB]) {
    const data = randomBytes(size);
    const oid = sha(data);
    const results = await Promise.all([put(store, oid, data), put(store, oid, data)]);
    t.ok(results.every((r) => r.size === size), `${size} bytes: both writers finished`);
    t.ok((await readAll((await store.open(oid))!)).equals(data), 'the object is intact');
    t.same(await uploadsUnder('cc/'), [], 'no upload left');
  }
});

t.test('framed metadata round trip', async (t) => {
  const store = openStore('fr/');
  const data = randomBytes(9 * MiB);
  const oid = anyOid();
  await put(store, oid, data, { framed: true });
  t.equal((await store.open(oid))!.framed, true, 'open: framed (multipart upload)');
  t.equal((await store.stat(oid))!.framed, true, 'stat: framed');
  const small = anyOid();
  await put(store, small, randomBytes(100), { framed: true });
  t.equal((await store.stat(small))!.framed, true, 'framed (single PUT)');
  await put(store, oid, data, { replace: true });
  t.equal((await store.stat(oid))!.framed, false, 'replaced by a plain copy: plain');
  const trash = `fr/trash/${oid.slice(0, 2)}/${oid.slice(2, 4)}/${oid}`;
  t.equal((await bucket.head(trash))?.framed, true, 'the replaced framed copy waits in the trash, still marked framed');
  await put(store, oid, data, { replace: true, framed: true });
  t.equal((await store.stat(oid))!.framed, true, 'and back');
});

t.test('sweepStaging removes old litter and trash, keeps young litter, objects and quarantine', async (t) => {
  const store = openStore('sw/');
  const hoursAgo = (h: number): Date => new Date(Date.now() - h * 3600_000);
  const age = (key: string, h: number): void => utimesSync(fileOf(key), hoursAgo(h), hoursAgo(h));
  const oldTrash = randomBytes(300);
  const youngTrash = randomBytes(301);
  const kept = randomBytes(302);
  const quarantined = randomBytes(303);
  for (const d of [oldTrash, youngTrash, kept, quarantined]) await put(store, sha(d), d);
  await store.delete(sha(oldTrash));
  await store.delete(sha(youngTrash));
  await store.quarantine(sha(quarantined));
  const shard = (oid: string): string => `${oid.slice(0, 2)}/${oid.slice(2, 4)}/${oid}`;
  age(`sw/trash/${shard(sha(oldTrash))}`, 7);
  age(`sw/trash/${shard(sha(quarantined))}`, 7);
  age(`sw/objects/${shard(sha(kept))}`, 7);
  const [qkey] = keysIn('sw/quarantine');
  age(qkey!, 7);
  await putKey('sw/staging/old.0123', Buffer.from('x'));
  await putKey('sw/staging/young.0123', Buffer.from('x'));
  await putKey(`sw/incoming/${'c'.repeat(32)}/${anyOid()}`, Buffer.from('x'));
  age('sw/staging/old.0123', 7);
  age(keysIn(`sw/incoming/${'c'.repeat(32)}`)[0]!, 7);
  // An upload abandoned hours ago (a crashed node) and one in progress on another node.
  const abandoned = store.keyOf(anyOid());
  const running = store.keyOf(anyOid());
  for (const key of [abandoned, running]) await client.sendText({ method: 'POST', key, query: [['uploads', '']] });
  const uploadsDir = join(s3.dir, s3.bucket, '._S3rver_uploads');
  for (const id of readdirSync(uploadsDir)) {
    const dir = join(uploadsDir, id);
    if (readFileSync(join(dir, 'key'), 'utf8') === abandoned) utimesSync(dir, hoursAgo(7), hoursAgo(7));
  }

  t.equal(await store.sweepStaging(0), 5, 'maxAge 0 still spares anything younger than 6 hours: 2 trash keys, staging, incoming, 1 upload');
  t.ok(await store.stat(sha(kept)), 'an old object stays');
  t.notOk(existsSync(fileOf(`sw/trash/${shard(sha(oldTrash))}`)), 'old trash removed');
  t.ok(existsSync(fileOf(`sw/trash/${shard(sha(youngTrash))}`)), 'young trash stays (readers may still fall back on it)');
  t.ok(existsSync(fileOf(qkey!)), 'quarantine is never swept');
  t.notOk(existsSync(fileOf('sw/staging/old.0123')), 'old staging key removed');
  t.ok(existsSync(fileOf('sw/staging/young.0123')), 'young staging key stays');
  t.same(await uploadsUnder('sw/'), [running], 'the abandoned upload aborted, the running one left alone');
  t.equal(await store.sweepStaging(0), 0, 'nothing more to sweep');
});

t.test('presigner: links, and promotion only after the digest is confirmed', async (t) => {
  const store = openStore('ps/');
  const p = store.presigner;
  t.equal(p.compressFrom, null, 'the backend compresses nothing');
  t.equal(p.maxPresignedPut, MAX_PRESIGNED_PUT);
  t.equal(await store.probeChecksumEnforcement(), false, 's3rver does not enforce x-amz-checksum-sha256');
  const { request } = await import('undici');
  const data = randomBytes(40_000);
  const oid = sha(data);
  const up = p.presignUpload('acme/game', oid, 900);
  t.match(up.href, /\/ps\/incoming\/[0-9a-f]{32}\//);
  const wrong = Buffer.from(data);
  wrong[0] ^= 1;
  t.equal((await request(up.href, { method: 'PUT', body: wrong })).statusCode, 200);
  const refused = await p.promoteIncoming('acme/game', oid, data.length).then(() => null, (e: unknown) => e);
  t.ok(isLfsError(refused) && refused.status === 422, 'wrong bytes: 422');
  t.equal(await store.stat(oid), null, 'and never visible');
  t.equal((await request(up.href, { method: 'PUT', body: data })).statusCode, 200);
  t.same(await p.promoteIncoming('acme/game', oid, data.length), { size: data.length, storedSize: data.length, created: true });
  const got = await request(p.presignDownload(oid, 900).href);
  t.ok(Buffer.from(await got.body.arrayBuffer()).equals(data), 'presigned GET of the promoted object');
  const missing = await p.promoteIncoming('acme/game', oid, data.length).then(() => null, (e: unknown) => e);
  t.ok(isLfsError(missing) && missing.status === 404, 'nothing uploaded: 404');
});

t.test('checkWritable', async (t) => {
  await openStore('cw/').checkWritable();
  t.notOk(existsSync(join(s3.dir, s3.bucket, 'cw', 'staging')) && readdirSync(join(s3.dir, s3.bucket, 'cw', 'staging')).length > 0, 'the probe object is removed again');
});

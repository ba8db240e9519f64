import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { KeyRing } from '../../src/crypto/key-ring.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { CRYPT_FRAME_SIZE, HEADER_SIZE, TAG_SIZE } from '../../src/format/encrypted-format.js';
import { parseOid, shardPath, type Oid } from '../../src/protocol/oid.js';
import { DiskBlobStore } from '../../src/store/disk.js';
import { EncryptingBlobStore, type EncryptionParts } from '../../src/store/layers/encrypt.js';
import { ForwardingBlobStore } from '../../src/store/layers/forwarding.js';
import type { BlobReader, BlobStore, ChunkSource } from '../../src/store/types.js';
import { drainChunks } from '../helpers/data.js';
import { tmpDir } from '../helpers/start-server.js';

// The encrypted format under attack, over the real disk backend: every way of changing stored bytes
// the format allows (header, frame, tag, order, length, frames from another object, the data key
// id, the key) makes the read fail, never return other bytes. The conformance suite checks the
// contract; this checks what the format promises.

const F = CRYPT_FRAME_SIZE;
const FULL = F + TAG_SIZE;
const root = tmpDir('stowage-encrypt-tamper-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const index = openSqliteIndex(join(root, 'index.sqlite'));
t.teardown(() => index.close());
const keyText = `k1 ${randomBytes(32).toString('base64')}`;
const ring = KeyRing.parse(keyText);
const backend = await DiskBlobStore.open(join(root, 'store'), { directIo: false });
const parts = (over: Partial<EncryptionParts> = {}): EncryptionParts => ({ keys: index.dataKeys, ring, encryptNew: true, ...over });
const store = new EncryptingBlobStore(backend, parts());

const oidOf = (b: Buffer): Oid => parseOid(createHash('sha256').update(b).digest('hex'))!;
const fileOf = (oid: Oid): string => join(root, 'store', 'objects', shardPath(oid));

async function put(s: BlobStore, data: Buffer, replace = false, announced = true): Promise<Oid> {
  const oid = oidOf(data);
  const w = await s.createWriter(oid, { expectedSize: announced ? data.length : null, replace });
  for (let at = 0; at < data.length; at += 100_000) w.write(data.subarray(at, at + 100_000));
  await w.finish();
  return oid;
}

async function readAll(s: BlobStore, oid: Oid, start?: number, end?: number): Promise<Buffer> {
  const r = await s.open(oid);
  if (r === null) throw new Error('absent');
  try {
    return await drainChunks(r.read(start ?? 0, end ?? r.size - 1));
  } finally {
    await r.close();
  }
}

/** Three frames and a bit: a full object of distinct bytes per frame. */
const objectOf = (seed: number): Buffer => Buffer.concat([randomBytes(3 * F), Buffer.from(`tail ${seed}`)]);

/** Stores a fresh object, lets `tamper` change its file, and asserts that a whole read fails as damaged. */
async function tampered(t: Test, what: string, tamper: (file: Buffer, oid: Oid) => Buffer, s: BlobStore = store): Promise<void> {
  const data = objectOf(Math.random());
  const oid = await put(store, data);
  t.same(await readAll(store, oid), data, `${what}: reads back intact before`);
  writeFileSync(fileOf(oid), tamper(readFileSync(fileOf(oid)), oid));
  await t.rejects(readAll(s, oid), /damaged|does not authenticate|encrypted/i, `${what}: the read fails`);
  await store.delete(oid);
}

t.test('every change to the stored bytes fails the read', async (t) => {
  const flip = (at: (b: Buffer) => number) => (b: Buffer): Buffer => ((b[at(b)]! ^= 0x01), b);
  await tampered(t, 'a flipped magic byte (never read as a plain object)', flip(() => 3));
  await tampered(t, 'a flipped version byte', flip(() => 16));
  await tampered(t, 'a flipped frame-size byte', flip(() => 22));
  await tampered(t, 'a flipped data key id byte', flip(() => 30));
  await tampered(t, 'a flipped reserved byte', flip(() => 45));
  await tampered(t, 'a flipped byte in the first frame', flip(() => HEADER_SIZE + 10));
  await tampered(t, 'a flipped byte in a middle frame', flip(() => HEADER_SIZE + FULL + 1000));
  await tampered(t, 'a flipped tag byte', flip(() => HEADER_SIZE + FULL - 3));
  await tampered(t, 'a flipped byte in the final frame', flip((b) => b.length - TAG_SIZE - 2));
  await tampered(t, 'a flipped final tag byte', flip((b) => b.length - 1));
  const frame = (b: Buffer, i: number): Buffer => b.subarray(HEADER_SIZE + i * FULL, HEADER_SIZE + (i + 1) * FULL);
  await tampered(t, 'two frames swapped', (b) => Buffer.concat([b.subarray(0, HEADER_SIZE), frame(b, 1), frame(b, 0), b.subarray(HEADER_SIZE + 2 * FULL)]));
  await tampered(t, 'truncated at a frame boundary', (b) => b.subarray(0, HEADER_SIZE + 2 * FULL));
  await tampered(t, 'the final frame dropped', (b) => b.subarray(0, HEADER_SIZE + 3 * FULL));
  await tampered(t, 'cut inside a frame', (b) => b.subarray(0, HEADER_SIZE + FULL + 100));
  await tampered(t, 'a frame added', (b) => Buffer.concat([b.subarray(0, HEADER_SIZE + 3 * FULL), frame(b, 2), b.subarray(HEADER_SIZE + 3 * FULL)]));
  await tampered(t, 'the header alone', (b) => b.subarray(0, HEADER_SIZE + TAG_SIZE));
  // Another object's frames, header and key id.
  const other = objectOf(7);
  const otherOid = await put(store, other);
  const otherFile = readFileSync(fileOf(otherOid));
  await tampered(t, 'a frame moved in from another object, same position', (b) => Buffer.concat([b.subarray(0, HEADER_SIZE + FULL), frame(otherFile, 1), b.subarray(HEADER_SIZE + 2 * FULL)]));
  await tampered(t, "another object's data key id in the header", (b) => Buffer.concat([b.subarray(0, 24), otherFile.subarray(24, 40), b.subarray(40)]));
  await tampered(t, "another object's whole copy under this oid", () => otherFile);
  await tampered(t, "another object's header", (b) => Buffer.concat([otherFile.subarray(0, HEADER_SIZE), b.subarray(HEADER_SIZE)]));
  t.same(await readAll(store, otherOid), other, 'the other object still reads');
});

t.test('the wrong key, no key, a lost data key row: the read fails, never returns ciphertext', async (t) => {
  const data = objectOf(1);
  const oid = await put(store, data);
  const wrongKey = new EncryptingBlobStore(backend, parts({ ring: KeyRing.parse(`k1 ${randomBytes(32).toString('base64')}`) }));
  await t.rejects(readAll(wrongKey, oid), /damaged/, 'a key of the same id with other bytes');
  const otherId = new EncryptingBlobStore(backend, parts({ ring: KeyRing.parse(`k2 ${randomBytes(32).toString('base64')}`) }));
  await t.rejects(readAll(otherId, oid), /key k1 is not in the key ring/, 'a ring without the key');
  const noKeys = new EncryptingBlobStore(backend, parts({ ring: null, encryptNew: false }));
  await t.rejects(readAll(noKeys, oid), /encrypted and no encryption key is configured/, 'no key ring at all');
  const id = readFileSync(fileOf(oid)).toString('hex', 24, 40);
  const row = (await index.dataKeys.getDataKey(id))!;
  await index.dataKeys.deleteDataKey(id);
  await t.rejects(readAll(store, oid), /no data key/, 'the wrapped key lost from the index');
  await index.dataKeys.putDataKey({ ...row, wrapped: Buffer.from(row.wrapped).fill(1, 20, 21) });
  await t.rejects(readAll(store, oid), /damaged/, 'a tampered wrapped key');
  await index.dataKeys.deleteDataKey(id);
  await index.dataKeys.putDataKey(row);
  t.same(await readAll(store, oid), data, 'the right row back: reads again');
});

t.test('encryption off with the keys given: encrypted and plain objects both read, new ones are plain', async (t) => {
  const sealed = objectOf(2);
  const sealedOid = await put(store, sealed);
  const off = new EncryptingBlobStore(backend, parts({ encryptNew: false }));
  t.same(await readAll(off, sealedOid), sealed, 'an encrypted object reads with encryption off');
  const plain = Buffer.from('plain object written with encryption off '.repeat(100));
  const plainOid = await put(off, plain);
  t.same(readFileSync(fileOf(plainOid)), plain, 'stored as it arrived');
  t.same(await readAll(store, plainOid), plain, 'and read back with encryption on');
  const lookalike = Buffer.concat([readFileSync(fileOf(sealedOid)).subarray(0, 16), randomBytes(100)]);
  await t.rejects(put(off, lookalike), /begins with the encrypted-object marker/, 'plain content that would read as encrypted is refused');
  const sealedLookalike = await put(store, lookalike);
  t.same(await readAll(store, sealedLookalike), lookalike, 'and stored (sealed) with encryption on');
});

t.test('data key rows follow the copies: kept, replaced, deleted', async (t) => {
  const rows = async (): Promise<number> => (await index.dataKeys.dataKeysNotWrappedWith('none', null, 1000)).length;
  const before = await rows();
  const data = objectOf(3);
  const oid = await put(store, data);
  t.equal(await rows(), before + 1, 'one row per stored copy');
  await put(store, data);
  t.equal(await rows(), before + 1, 'a second write keeps the stored copy and drops its own key');
  const first = readFileSync(fileOf(oid)).toString('hex', 24, 40);
  await put(store, data, true);
  const second = readFileSync(fileOf(oid)).toString('hex', 24, 40);
  t.not(second, first, 'a replace writes under a fresh data key');
  t.equal(await index.dataKeys.getDataKey(first), null, "the replaced copy's key is gone");
  t.equal(await rows(), before + 1);
  t.same(await readAll(store, oid), data);
  t.equal(await store.delete(oid), true);
  t.equal(await index.dataKeys.getDataKey(second), null, 'a delete removes its key');
  t.equal(await rows(), before);
});

/** The backend, counting the stored bytes each read asks for. */
class CountingReads extends ForwardingBlobStore {
  bytes = 0;
  override async open(oid: Oid): Promise<BlobReader | null> {
    const r = await this.inner.open(oid);
    if (r === null) return null;
    return {
      size: r.size,
      storedSize: r.storedSize,
      framed: r.framed,
      read: (s, e): ChunkSource => ((this.bytes += e - s + 1), r.read(s, e)),
      readAt: (into, p) => ((this.bytes += into.byteLength), r.readAt(into, p)),
      close: () => r.close(),
    };
  }
}

t.test('a range read decrypts only the frames it touches', async (t) => {
  const data = randomBytes(40 * F + 5);
  const oid = await put(store, data);
  const counting = new CountingReads(backend);
  const s = new EncryptingBlobStore(counting, parts());
  const start = 20 * F + 100;
  const end = start + 3 * F; // touches frames 20 to 23
  t.same(await readAll(s, oid, start, end), data.subarray(start, end + 1), 'the range');
  const atOpen = HEADER_SIZE + (5 + TAG_SIZE); // header and the final frame
  t.equal(counting.bytes, atOpen + 4 * FULL, `read ${counting.bytes} stored bytes: header, final frame, four frames`);
});

t.test('sealed as bytes arrive (size announced) or a frame held at a time (not): the same format, checked sizes', async (t) => {
  for (const size of [0, 1, F - 1, F, F + 1, 3 * F, 3 * F + 77]) {
    const data = randomBytes(size);
    const streamed = await put(store, data);
    const streamedFile = readFileSync(fileOf(streamed));
    await store.delete(streamed);
    const held = await put(store, data, false, false);
    const heldFile = readFileSync(fileOf(held));
    t.equal(streamedFile.byteLength, heldFile.byteLength, `${size} B: the same stored size`);
    t.same(streamedFile.subarray(0, 20), heldFile.subarray(0, 20), `${size} B: the same header but for the key id`);
    t.same(await readAll(store, held), data, `${size} B: reads back`);
    await store.delete(held);
  }
  const data = randomBytes(F + 10);
  const long = await store.createWriter(oidOf(data), { expectedSize: F });
  t.throws(() => long.write(data), /size does not match/i, 'more bytes than announced: the write fails');
  await long.abort();
  const short = await store.createWriter(oidOf(data), { expectedSize: data.length + 1 });
  short.write(data);
  await t.rejects(short.finish(), /size does not match/i, 'fewer bytes than announced: finish fails');
  await short.abort();
  t.equal(await store.open(oidOf(data)), null, 'neither left a copy');
});

t.test('copies written with another frame size (64 KiB, as before 256 KiB) still read, ranges too', async (t) => {
  const small = 64 << 10;
  const older = new EncryptingBlobStore(backend, parts({ frameSize: small }));
  const data = randomBytes(5 * small + 3);
  const oid = await put(older, data);
  t.equal(readFileSync(fileOf(oid)).readUInt32BE(20), small, 'the header names its frame size');
  const counting = new CountingReads(backend);
  const s = new EncryptingBlobStore(counting, parts());
  t.same(await readAll(s, oid), data, 'reads back whole through a store writing 256 KiB frames');
  const atOpen = counting.bytes;
  t.same(await readAll(s, oid, small + 10, 2 * small + 10), data.subarray(small + 10, 2 * small + 11), 'a range');
  t.equal(counting.bytes - atOpen, HEADER_SIZE + 3 + TAG_SIZE + 2 * (small + TAG_SIZE), 'header, final frame and the two frames it covers');
  t.equal(readFileSync(fileOf(await put(store, randomBytes(10)))).readUInt32BE(20), F, 'new copies: the current frame size');
});

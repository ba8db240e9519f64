import { createHash } from 'node:crypto';
import type { Test } from 'tap';
import { CRYPT_FRAME_SIZE, storedSizeOf } from '../../src/format/encrypted-format.js';
import { FRAME_SIZE, MIN_FRAMED_SIZE } from '../../src/format/frame-format.js';
import { parseOid, type Oid } from '../../src/protocol/oid.js';
import { isInjectedFault, type FaultyBlobStore } from '../../src/store/layers/faulty.js';
import type { BlobStore, ObjectWriter, PutResult, WriterOptions } from '../../src/store/types.js';
import { drainChunks, textLike } from '../helpers/data.js';
import { SMALL_OBJECT_MAX } from '../../src/store/journal/journaling-store.js';

/**
 * A journal stack acknowledges a small object once its bytes are in the journal record, as given:
 * its stored size there is its logical size until it is written out below, when the journal reports
 * the compressed size to the index (test/integration/store-defects.test.ts checks that end to end).
 */
const inJournal = (h: { journals: boolean }, size: number): boolean => h.journals && size <= SMALL_OBJECT_MAX;

/**
 * The BlobStore conformance suite (docs/storage-contract.md; after tus `packages/utils/src/test/stores.ts`):
 * what every backend and every layer stack must do, asserted through the contract of
 * src/store/types.ts alone. blob-store.test.ts runs it against each stack; a new backend adds its
 * stacks there. Each case opens a fresh store (`make`), so cases never see each other's objects.
 */

/** One store under test, as `make` builds it. */
export interface StoreUnderTest {
  readonly store: BlobStore;
  /** The stack has the verify layer: only then are sha256 and size checked on write. */
  readonly verifies: boolean;
  /** The stack has the compress layer: compressible objects take fewer bytes than their size. */
  readonly compresses: boolean;
  /** The stack may hold small objects outside their own file or key (a journal): storedBytesOf may be null for them. */
  readonly journals: boolean;
  /** The stack has the encrypting layer (on, with a key ring): every object takes its header and frame tags on top. */
  readonly encrypts?: boolean;
  /**
   * The backend creates an oid atomically (disk: a hard link fails on an existing name), so of two
   * concurrent writers exactly one reports `created`. A bucket without conditional writes cannot
   * tell: both may report it, and the bytes are the same either way (content-addressed).
   */
  readonly atomicCreate: boolean;
  /**
   * The largest object openInLine gives back, where the stack reads in line (disk: a plain object up
   * to INLINE_READ_MAX outside the journal); 0 where it never does (a bucket, a faulty layer).
   */
  readonly inLineMax: number;
  /** The stack under the verify layer, to plant bytes that do not match their oid; null where there is none or it is not reachable. */
  readonly below: BlobStore | null;
  /** The faulty layer in the stack, if any. */
  readonly faulty: FaultyBlobStore | null;
  /** Staging litter the backend holds right now (disk: files under staging/; S3: keys under staging/ and incoming/). */
  countStaging(): Promise<number>;
  /** Bytes the backend really holds for the oid in its own file or key (file size, key size); null when there is none. */
  storedBytesOf(oid: Oid): Promise<number | null>;
  /** Leaves one piece of staging litter as a crashed process would, older than any sweep age (absent where that cannot be faked). */
  plantStagingLitter?(): Promise<void>;
  /** Closes the store and removes what the harness created. */
  close(): Promise<void>;
}

/** Builds a fresh, empty store under test. */
export type MakeStore = () => Promise<StoreUnderTest>;

/** Logical sizes around the frame boundaries (MIN_FRAMED_SIZE is 4096). */
export const ROUND_TRIP_SIZES = [0, 1, MIN_FRAMED_SIZE - 1, MIN_FRAMED_SIZE, FRAME_SIZE - 1, FRAME_SIZE, FRAME_SIZE + 1, 2 * FRAME_SIZE + 7] as const;

type Kind = 'compressible' | 'incompressible';
const KINDS: readonly Kind[] = ['compressible', 'incompressible'];

const generated = new Map<string, Buffer>();

/**
 * Deterministic bytes: text-like (compressible) or xorshift noise (incompressible), by seed (rudolfs
 * seeds its data likewise). Kept for the next stack: the suite never changes them.
 */
export function seededData(kind: Kind, size: number, seed: number): Buffer {
  const key = `${kind}/${size}/${seed}`;
  let data = generated.get(key);
  if (data === undefined) generated.set(key, (data = generate(kind, size, seed)));
  return data;
}

function generate(kind: Kind, size: number, seed: number): Buffer {
  if (kind === 'compressible') return textLike(size, seed);
  const out = Buffer.alloc(size);
  const words = new Uint32Array(out.buffer, out.byteOffset, size >>> 2);
  let x = (seed * 2654435761 + 0x9e3779b9) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  for (let i = words.length * 4; i < size; i++) out[i] = (x >>> ((i & 3) * 8)) & 0xff;
  return out;
}

/** The oid of `data`. */
export function oidOf(data: Uint8Array): Oid {
  const oid = parseOid(createHash('sha256').update(data).digest('hex'));
  if (oid === null) throw new Error('sha256 hex is always an oid');
  return oid;
}

function sha(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * Feeds one writer as the HTTP layer and the verify layer do: copied chunks from a buffer reused at
 * once, or blocks of their own given with `release`; waits for `onDrain` whenever write() says so.
 */
class Feed {
  readonly writer: ObjectWriter;
  /** How often release ran, per block given with one. */
  readonly releases: number[] = [];
  #wake: (() => void) | null = null;

  constructor(writer: ObjectWriter) {
    this.writer = writer;
    writer.onDrain(() => {
      const wake = this.#wake;
      this.#wake = null;
      wake?.();
    });
  }

  /**
   * Writes `data` in chunks of `chunk` bytes without `release`, from one scratch buffer scribbled
   * over right after each write() returns (a uWS chunk is reused the same way): a writer that kept
   * the view instead of copying stores garbage, which the reads then show.
   */
  async copy(data: Uint8Array, chunk: number): Promise<void> {
    const scratch = Buffer.alloc(Math.max(1, Math.min(chunk, data.byteLength)));
    for (let at = 0; at < data.byteLength; at += chunk) {
      const n = Math.min(chunk, data.byteLength - at);
      scratch.set(data.subarray(at, at + n));
      const more = this.writer.write(scratch.subarray(0, n));
      scratch.fill(0xa5);
      if (!more) await this.#drained();
    }
  }

  /** Writes `data` in blocks of `block` bytes, each in shared memory of its own and given with `release`. */
  async blocks(data: Uint8Array, block: number): Promise<void> {
    if (!(block > 0)) throw new Error(`blockSize ${block} cannot cut an object into blocks`);
    for (let at = 0; at < data.byteLength; at += block) {
      const n = Math.min(block, data.byteLength - at);
      const view = new Uint8Array(new SharedArrayBuffer(block), 0, n);
      view.set(data.subarray(at, at + n));
      const i = this.releases.push(0) - 1;
      const more = this.writer.write(view, () => void this.releases[i]!++);
      if (!more) await this.#drained();
    }
  }

  #drained(): Promise<void> {
    return new Promise((resolve) => (this.#wake = resolve));
  }
}

async function newFeed(store: BlobStore, oid: Oid, options: Partial<WriterOptions> & { expectedSize: number | null }): Promise<Feed> {
  return new Feed(await store.createWriter(oid, options));
}

/** Stores `data` under its oid (or `oid`), written in 64 KiB copied chunks. */
async function put(store: BlobStore, data: Uint8Array, options: { oid?: Oid; replace?: boolean; chunk?: number } = {}): Promise<PutResult> {
  const feed = await newFeed(store, options.oid ?? oidOf(data), { expectedSize: data.byteLength, replace: options.replace ?? false });
  try {
    await feed.copy(data, options.chunk ?? 64 << 10);
  } catch (e) {
    await feed.writer.abort();
    throw e;
  }
  return feed.writer.finish();
}

/** Bytes [start, end] of an open reader. */
function readRange(reader: { read(start: number, end: number): { next(): Promise<Uint8Array | null>; close(): Promise<void> } }, start: number, end: number): Promise<Buffer> {
  return drainChunks(reader.read(start, end));
}

/** The whole object, or null when the store does not hold it. */
async function readObject(store: BlobStore, oid: Oid): Promise<Buffer | null> {
  const reader = await store.open(oid);
  if (reader === null) return null;
  try {
    return reader.size === 0 ? Buffer.alloc(0) : await readRange(reader, 0, reader.size - 1);
  } finally {
    await reader.close();
  }
}

async function listed(store: BlobStore): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const o of store.list()) {
    if (out.has(o.oid)) throw new Error(`list yielded ${o.oid} twice`);
    out.set(o.oid, o.storedSize);
  }
  return out;
}

async function caught(p: Promise<unknown> | (() => unknown)): Promise<unknown> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    return e;
  }
  return null;
}

function codeOf(e: unknown): unknown {
  return (e as { code?: unknown } | null)?.code;
}

/** Asserts the store holds nothing for `oid` and no more staging litter than `staging`. */
async function assertNothingLeft(t: Test, h: StoreUnderTest, oid: Oid, staging: number, what: string): Promise<void> {
  t.equal(await h.store.open(oid), null, `${what}: open finds nothing`);
  t.equal(await h.store.stat(oid), null, `${what}: stat finds nothing`);
  t.notOk((await listed(h.store)).has(oid), `${what}: list does not yield it`);
  t.equal(await h.storedBytesOf(oid), null, `${what}: the backend holds no bytes under it`);
  t.equal(await h.countStaging(), staging, `${what}: no staging litter`);
}

/** Asserts everything the store says about a stored object agrees, and that its bytes are `data`. */
async function assertStored(t: Test, h: StoreUnderTest, data: Buffer, put: PutResult | null, what: string): Promise<void> {
  const oid = oidOf(data);
  const stat = await h.store.stat(oid);
  t.ok(stat, `${what}: stat finds it`);
  if (stat === null) return;
  t.equal(stat.size, data.byteLength, `${what}: stat size is the logical size`);
  if (put !== null) {
    t.equal(put.size, data.byteLength, `${what}: put size is the logical size`);
    t.equal(stat.storedSize, put.storedSize, `${what}: stat storedSize matches the put's`);
  }
  const reader = await h.store.open(oid);
  t.ok(reader, `${what}: open finds it`);
  if (reader === null) return;
  try {
    t.equal(reader.size, stat.size, `${what}: open size matches stat`);
    t.equal(reader.storedSize, stat.storedSize, `${what}: open storedSize matches stat`);
    t.equal(reader.framed, stat.framed, `${what}: open framed matches stat`);
    const back = data.byteLength === 0 ? Buffer.alloc(0) : await readRange(reader, 0, data.byteLength - 1);
    t.equal(back.byteLength, data.byteLength, `${what}: reads back as many bytes`);
    t.equal(sha(back), sha(data), `${what}: reads back the same bytes`);
  } finally {
    await reader.close();
  }
  // In line: the object's own bytes or nothing (a framed object must never come back as its frames).
  const inLine = h.store.openInLine?.(oid);
  try {
    if (inLine !== undefined) t.equal(sha(inLine.bytes), sha(data), `${what}: openInLine gives the same bytes`);
    else if (h.inLineMax > 0 && data.byteLength <= h.inLineMax && stat.framed !== true && !inJournal(h, data.byteLength)) t.fail(`${what}: a small plain object is read in line`);
  } finally {
    inLine?.release();
  }
  const held = await h.storedBytesOf(oid);
  if (held === null) t.ok(h.journals && data.byteLength < FRAME_SIZE, `${what}: only a journaling stack holds a small object outside its own file`);
  else t.equal(held, stat.storedSize, `${what}: storedSize is what the backend really holds`);
  if (!h.compresses && h.encrypts !== true) t.equal(stat.storedSize, data.byteLength, `${what}: stored as given without a compress layer`);
  if (!h.compresses && h.encrypts === true) t.equal(stat.storedSize, storedSizeOf(data.byteLength, CRYPT_FRAME_SIZE), `${what}: the plaintext, its header and one tag per frame`);
}

/**
 * Registers the conformance cases for one stack as subtests of `t` (one subtest named `name`).
 * Every case asserts through the public contract only; faulty cases run where the stack has a
 * faulty layer, digest cases where it verifies.
 */
export async function blobStoreConformance(t: Test, name: string, make: MakeStore): Promise<void> {
  await t.test(name, async (t) => {
    /** A case on a fresh store, closed when the case ends. */
    const test = async (title: string, fn: (t: Test, h: StoreUnderTest) => Promise<void>): Promise<void> => {
      await t.test(title, async (t) => {
        const h = await make();
        t.teardown(() => h.close());
        await fn(t, h);
      });
    };

    for (const kind of KINDS) {
      await test(`${kind} objects round-trip at every size around the frame boundaries`, async (t, h) => {
        t.same([...(await listed(h.store))], [], 'a new store lists nothing');
        t.ok(Number.isInteger(h.store.blockSize) && h.store.blockSize > 0, `blockSize is a positive whole number (${h.store.blockSize})`);
        for (const size of ROUND_TRIP_SIZES) {
          const data = seededData(kind, size, size);
          const r = await put(h.store, data);
          t.equal(r.created, true, `${size} B: created`);
          await assertStored(t, h, data, r, `${size} B`);
          if (h.compresses && !inJournal(h, size) && kind === 'compressible' && size >= MIN_FRAMED_SIZE) t.ok(r.storedSize < size, `${size} B: compressed (${r.storedSize} stored)`);
          if (kind === 'incompressible') t.ok(r.storedSize >= size, `${size} B: incompressible bytes never claim fewer stored bytes than their size`);
        }
        const oids = ROUND_TRIP_SIZES.map((size) => oidOf(seededData(kind, size, size))).sort();
        t.same([...(await listed(h.store)).keys()].sort(), oids, 'list yields exactly the oids written');
      });
    }

    await test('odd chunk sizes and chunked uploads without a size hint', async (t, h) => {
      const small = seededData('compressible', 2 * MIN_FRAMED_SIZE + 808, 1);
      const feed = await newFeed(h.store, oidOf(small), { expectedSize: null });
      await feed.copy(small, 1);
      const r = await feed.writer.finish();
      t.equal(r.created, true, '1-byte chunks, no expected size: created');
      await assertStored(t, h, small, r, '1-byte chunks');
      for (const kind of KINDS) {
        const data = seededData(kind, FRAME_SIZE + 4097, 2);
        const r = await put(h.store, data, { chunk: 7 << 10 });
        await assertStored(t, h, data, r, `7 KiB chunks, ${kind}`);
      }
      const odd = seededData('incompressible', FRAME_SIZE + 13, 3);
      await assertStored(t, h, odd, await put(h.store, odd, { chunk: (64 << 10) + 1 }), '64 KiB + 1 chunks');
    });

    for (const kind of KINDS) {
      await test(`${kind}: whole blocks given with release, then ranged reads`, async (t, h) => {
        const size = 2 * FRAME_SIZE + 7;
        const data = seededData(kind, size, 4);
        const feed = await newFeed(h.store, oidOf(data), { expectedSize: size });
        await feed.blocks(data, h.store.blockSize);
        const r = await feed.writer.finish();
        t.equal(r.created, true, 'created');
        t.same(feed.releases, feed.releases.map(() => 1), `each of the ${feed.releases.length} blocks released exactly once by the time finish resolves`);
        await assertStored(t, h, data, r, 'blocks');
        const reader = await h.store.open(oidOf(data));
        t.ok(reader);
        if (reader === null) return;
        t.teardown(() => reader.close());
        const ranges: [string, number, number][] = [
          ['first byte', 0, 0],
          ['last byte', size - 1, size - 1],
          ['across the first frame boundary', FRAME_SIZE - 5, FRAME_SIZE + 5],
          ['the last byte of a frame', FRAME_SIZE - 1, FRAME_SIZE - 1],
          ['the first byte of a frame', FRAME_SIZE, FRAME_SIZE],
          ['across two frame boundaries', FRAME_SIZE - 1, 2 * FRAME_SIZE],
          ['the short last frame', 2 * FRAME_SIZE, size - 1],
          ['from inside to the end', 12345, size - 1],
          ['whole', 0, size - 1],
        ];
        for (const [what, start, end] of ranges) {
          const got = await readRange(reader, start, end);
          t.equal(got.byteLength, end - start + 1, `${what}: length`);
          t.ok(got.equals(data.subarray(start, end + 1)), `${what}: bytes`);
        }
      });
    }

    await test('release is called exactly once per chunk on abort and on failure', async (t, h) => {
      const block = h.store.blockSize;
      const data = seededData('incompressible', block + (block >>> 1) + 7, 5);
      const oid = oidOf(data);
      const staging = await h.countStaging();

      const aborted = await newFeed(h.store, oid, { expectedSize: data.byteLength });
      await aborted.blocks(data.subarray(0, block + 1), block);
      await aborted.writer.abort();
      t.same(aborted.releases, [1, 1], 'abort: every block released once');
      await assertNothingLeft(t, h, oid, staging, 'after abort');

      if (h.verifies) {
        const wrong = seededData('incompressible', data.byteLength, 6);
        const bad = await newFeed(h.store, oid, { expectedSize: data.byteLength });
        const e = await caught(async () => {
          await bad.blocks(wrong, block);
          await bad.writer.finish();
        });
        await bad.writer.abort();
        t.equal(codeOf(e), 'LFS_ERR_DIGEST_MISMATCH', 'bytes that are not the oid are refused');
        t.same(bad.releases, bad.releases.map(() => 1), 'digest failure: every block released once');
        await assertNothingLeft(t, h, oid, staging, 'after a digest failure');
      }
      if (h.faulty !== null) {
        h.faulty.failWriteAfter(block);
        const before = h.faulty.injected;
        const broken = await newFeed(h.store, oid, { expectedSize: data.byteLength });
        const e = await caught(async () => {
          await broken.blocks(data, block);
          await broken.writer.finish();
        });
        await broken.writer.abort();
        h.faulty.heal();
        t.ok(h.faulty.injected > before, 'the planned write fault fired');
        t.ok(isInjectedFault(e), 'the write fails with the injected fault');
        t.same(broken.releases, broken.releases.map(() => 1), 'write failure: every block released once');
        await assertNothingLeft(t, h, oid, staging, 'after a write failure');
      }
    });

    await test('abort mid-write leaves nothing, and the oid can then be stored', async (t, h) => {
      const staging = await h.countStaging();
      for (const [what, data] of [
        ['small', seededData('compressible', 1000, 7)],
        ['past a frame', seededData('compressible', 2 * FRAME_SIZE + 7, 7)],
      ] as const) {
        const oid = oidOf(data);
        const feed = await newFeed(h.store, oid, { expectedSize: data.byteLength });
        await feed.copy(data.subarray(0, Math.min(data.byteLength - 1, FRAME_SIZE + 100)), 64 << 10);
        await feed.writer.abort();
        await t.resolves(feed.writer.abort(), `${what}: a second abort is harmless`);
        await assertNothingLeft(t, h, oid, staging, `${what}: after abort`);
        const r = await put(h.store, data);
        t.equal(r.created, true, `${what}: the next write of the oid creates it`);
        await assertStored(t, h, data, r, `${what}: after abort and rewrite`);
      }
    });

    await test('bad digest, short body and overrun are refused and leave nothing', async (t, h) => {
      if (!h.verifies) {
        t.pass('this stack has no verify layer: the stack above it checks digests');
        return;
      }
      const staging = await h.countStaging();
      for (const size of [100, FRAME_SIZE + 1]) {
        const data = seededData('compressible', size, 8);
        const oid = oidOf(data);
        const wrong = seededData('compressible', size, 9);
        let e = await caught(put(h.store, wrong, { oid }));
        t.equal(codeOf(e), 'LFS_ERR_DIGEST_MISMATCH', `${size} B: wrong bytes are refused`);
        await assertNothingLeft(t, h, oid, staging, `${size} B: after a bad digest`);

        const short = await newFeed(h.store, oid, { expectedSize: size });
        e = await caught(async () => {
          await short.copy(data.subarray(0, size - 1), 64 << 10);
          await short.writer.finish();
        });
        await short.writer.abort();
        t.equal(codeOf(e), 'LFS_ERR_SIZE_MISMATCH', `${size} B: a short body is refused`);
        await assertNothingLeft(t, h, oid, staging, `${size} B: after a short body`);

        const long = await newFeed(h.store, oid, { expectedSize: size });
        e = await caught(async () => {
          await long.copy(Buffer.concat([data, Buffer.from('x')]), 64 << 10);
          await long.writer.finish();
        });
        await long.writer.abort();
        t.equal(codeOf(e), 'LFS_ERR_SIZE_MISMATCH', `${size} B: a body past the announced size is refused`);
        await assertNothingLeft(t, h, oid, staging, `${size} B: after an overrun`);
      }
    });

    await test('concurrent writers of one oid: both finish, one creates, bytes intact', async (t, h) => {
      const staging = await h.countStaging();
      for (const data of [seededData('compressible', 300_000, 10), seededData('incompressible', FRAME_SIZE + 3, 10)]) {
        const oid = oidOf(data);
        const a = await newFeed(h.store, oid, { expectedSize: data.byteLength });
        const b = await newFeed(h.store, oid, { expectedSize: data.byteLength });
        const step = 64 << 10;
        for (let at = 0; at < data.byteLength; at += step) {
          await a.copy(data.subarray(at, at + step), step);
          await b.copy(data.subarray(at, at + step), step);
        }
        const results = await Promise.all([a.writer.finish(), b.writer.finish()]);
        const creators = results.filter((r) => r.created).length;
        if (h.atomicCreate) t.equal(creators, 1, `${data.byteLength} B: exactly one writer created the object`);
        else t.ok(creators >= 1, `${data.byteLength} B: at least one writer created the object`);
        t.equal(results[0].storedSize, results[1].storedSize, `${data.byteLength} B: both report the stored size`);
        await assertStored(t, h, data, results.find((r) => r.created) ?? null, `${data.byteLength} B, after two writers`);
      }
      t.equal((await listed(h.store)).size, 2, 'one copy per oid');
      t.equal(await h.countStaging(), staging, 'no staging litter');
    });

    await test('a second write keeps the stored copy; replace overwrites it', async (t, h) => {
      const data = seededData('compressible', 300_000, 11);
      const oid = oidOf(data);
      const first = await put(h.store, data);
      t.equal(first.created, true, 'first write creates');
      const again = await put(h.store, data);
      t.equal(again.created, false, 'second write of the oid: created false');
      t.equal(again.size, data.byteLength, 'and reports the size');
      await assertStored(t, h, data, first, 'after a second write');
      const replaced = await put(h.store, data, { replace: true });
      t.equal(replaced.created, true, 'replace: the new copy is stored');
      await assertStored(t, h, data, replaced, 'after replace');
      t.equal((await listed(h.store)).size, 1, 'still one copy');

      // Bytes that are not the oid's: written straight (no verify layer), or planted below it.
      const other = seededData('compressible', 300_000, 12);
      const plant = h.verifies ? h.below : h.store;
      if (plant === null) return;
      const planted = await put(plant, other, { oid, replace: true });
      t.equal(planted.created, true, 'bytes planted under the oid with replace');
      t.ok((await readObject(h.store, oid))?.equals(other), 'the store now serves the planted bytes');
      if (h.verifies) {
        t.equal((await put(h.store, data)).created, false, 'a write without replace keeps them (what quarantine is for)');
        t.ok((await readObject(h.store, oid))?.equals(other), 'unchanged');
        t.equal((await put(h.store, data, { replace: true })).created, true, 'replace stores the right bytes');
        t.ok((await readObject(h.store, oid))?.equals(data), 'which are served from then on');
      } else {
        t.equal((await put(h.store, data, { oid })).created, false, 'without replace the stored copy stays');
        t.ok((await readObject(h.store, oid))?.equals(other), 'unchanged');
      }
    });

    await test('reads opened before a delete see the whole object; delete and quarantine of a missing oid answer false', async (t, h) => {
      for (const data of [seededData('compressible', 300_000, 13), seededData('incompressible', FRAME_SIZE + 3, 13)]) {
        const oid = oidOf(data);
        await put(h.store, data);
        const reader = await h.store.open(oid);
        t.ok(reader, 'opened');
        if (reader === null) return;
        try {
          t.equal(await h.store.delete(oid), true, `${data.byteLength} B: delete answers true`);
          const whole = await readRange(reader, 0, data.byteLength - 1);
          t.ok(whole.equals(data), `${data.byteLength} B: the open reader reads the original bytes after the delete`);
          const tail = await readRange(reader, data.byteLength - 10, data.byteLength - 1);
          t.ok(tail.equals(data.subarray(data.byteLength - 10)), `${data.byteLength} B: and a second range of them`);
        } finally {
          await reader.close();
        }
        t.equal(await h.store.open(oid), null, `${data.byteLength} B: open after the delete finds nothing`);
        t.equal(await h.store.stat(oid), null, `${data.byteLength} B: nor does stat`);
        t.equal(await h.storedBytesOf(oid), null, `${data.byteLength} B: the backend holds no bytes`);
        t.equal(await h.store.delete(oid), false, `${data.byteLength} B: a second delete answers false`);
      }
      const missing = oidOf(Buffer.from('never stored'));
      t.equal(await h.store.open(missing), null, 'open of a missing oid: null');
      t.equal(await h.store.stat(missing), null, 'stat of a missing oid: null');
      t.equal(await h.store.delete(missing), false, 'delete of a missing oid: false');
      t.equal(await h.store.quarantine(missing), false, 'quarantine of a missing oid: false');
    });

    await test('openInLine gives a small object whole or nothing: never a missing, deleted or quarantined one', async (t, h) => {
      const none = (oid: Oid, what: string): void => {
        const held = h.store.openInLine?.(oid);
        held?.release();
        t.equal(held, undefined, `openInLine of ${what}: nothing`);
      };
      none(oidOf(Buffer.from('never stored')), 'a missing oid');
      for (const kind of KINDS) {
        const data = seededData(kind, 20_000, 31);
        const oid = oidOf(data);
        await put(h.store, data);
        const held = h.store.openInLine?.(oid);
        if (held !== undefined) {
          t.ok(held.bytes.equals(data), `${kind}: the object's own bytes`);
          held.release();
          held.release(); // a second release gives nothing back twice
        } else {
          t.ok(h.inLineMax === 0 || inJournal(h, data.byteLength) || (await h.store.stat(oid))?.framed === true, `${kind}: left to open only where the stack does not read it in line`);
        }
        const again = await readObject(h.store, oid);
        t.ok(again?.equals(data), `${kind}: open reads it all the same`);
        await h.store.delete(oid);
        none(oid, `${kind} after its delete`);
      }
      const kept = seededData('incompressible', 5_000, 32);
      await put(h.store, kept);
      await h.store.quarantine(oidOf(kept));
      none(oidOf(kept), 'a quarantined object');
      const large = seededData('incompressible', Math.max(h.inLineMax, FRAME_SIZE) + 1, 33);
      await put(h.store, large);
      none(oidOf(large), 'an object larger than the stack reads in line');
    });

    await test('list yields exactly the stored oids with their stored sizes', async (t, h) => {
      const objects = [seededData('compressible', 10, 14), seededData('compressible', 5000, 14), seededData('compressible', 300_000, 14), seededData('incompressible', FRAME_SIZE + 1, 14)];
      const results = new Map<string, PutResult>();
      for (const data of objects) results.set(oidOf(data), await put(h.store, data));
      const gone = oidOf(objects[1]!);
      t.equal(await h.store.delete(gone), true, 'one deleted');
      const list = await listed(h.store);
      t.same([...list.keys()].sort(), [...results.keys()].filter((oid) => oid !== gone).sort(), 'list: the oids written, without the deleted one');
      for (const [oid, storedSize] of list) {
        t.equal(storedSize, results.get(oid)?.storedSize, `list storedSize of ${oid.slice(0, 8)} matches the put`);
        t.equal(storedSize, (await h.store.stat(oid as Oid))?.storedSize, `and stat`);
      }
    });

    await test('stored-size accounting matches what the backend holds', async (t, h) => {
      for (const data of [seededData('compressible', 100, 15), seededData('compressible', 300_000, 15), seededData('incompressible', 300_000, 15), seededData('compressible', FRAME_SIZE + 1, 15)]) {
        const r = await put(h.store, data);
        await assertStored(t, h, data, r, `${data.byteLength} B`);
        const held = await h.storedBytesOf(oidOf(data));
        if (held !== null) t.equal(r.storedSize, held, `${data.byteLength} B: put storedSize is the backend's byte count`);
      }
      const text = seededData('compressible', 300_000, 15);
      const r = (await h.store.stat(oidOf(text)))!;
      // The defect this guards: a small compressed object counted at its logical size.
      if (h.compresses && !inJournal(h, text.byteLength)) t.ok(r.storedSize < text.byteLength / 2, `300,000 text bytes take ${r.storedSize} stored bytes, not their logical size`);
      // A journaled object takes its own size until it is written out (sealed in the journal too).
      else if (h.encrypts === true && !inJournal(h, text.byteLength)) t.equal(r.storedSize, storedSizeOf(text.byteLength, CRYPT_FRAME_SIZE), '300,000 bytes sealed: header and frame tags on top');
      else t.equal(r.storedSize, text.byteLength, '300,000 bytes stored as given');
    });

    await test('quarantine moves the bytes out; the next write stores fresh ones', async (t, h) => {
      const data = seededData('compressible', 300_000, 16);
      const oid = oidOf(data);
      await put(h.store, data);
      t.equal(await h.store.quarantine(oid), true, 'quarantine answers true');
      t.equal(await h.store.open(oid), null, 'open finds nothing');
      t.equal(await h.store.stat(oid), null, 'stat finds nothing');
      t.notOk((await listed(h.store)).has(oid), 'list does not yield it');
      t.equal(await h.store.quarantine(oid), false, 'a second quarantine answers false');
      const r = await put(h.store, data);
      t.equal(r.created, true, 'the next write creates it');
      await assertStored(t, h, data, r, 'after quarantine');

      if (!h.verifies || h.below === null) return;
      // Self-healing: bad bytes under the oid are quarantined, and the next upload stores good ones.
      await put(h.below, seededData('compressible', 300_000, 17), { oid, replace: true });
      t.notOk((await readObject(h.store, oid))?.equals(data), 'bad bytes planted under the oid');
      t.equal(await h.store.quarantine(oid), true, 'quarantined');
      t.equal((await put(h.store, data)).created, true, 'the next upload stores the good bytes');
      t.ok((await readObject(h.store, oid))?.equals(data), 'which are served');
    });

    await test('sweepStaging clears litter, never a finished object or a write in flight', async (t, h) => {
      const kept = seededData('compressible', 300_000, 18);
      await put(h.store, kept);
      const dropped = seededData('incompressible', FRAME_SIZE + 5, 18);
      const aborted = await newFeed(h.store, oidOf(dropped), { expectedSize: dropped.byteLength });
      await aborted.copy(dropped.subarray(0, FRAME_SIZE + 1), 64 << 10);
      await aborted.writer.abort();
      const flying = seededData('incompressible', FRAME_SIZE + 9, 19);
      const inFlight = await newFeed(h.store, oidOf(flying), { expectedSize: flying.byteLength });
      await inFlight.copy(flying.subarray(0, FRAME_SIZE + 1), 64 << 10);

      t.ok((await h.store.sweepStaging(0)) >= 0, 'a sweep with no age limit runs');
      await inFlight.copy(flying.subarray(FRAME_SIZE + 1), 64 << 10);
      const r = await inFlight.writer.finish();
      t.equal(r.created, true, 'the write in flight during the sweep still finishes');
      await assertStored(t, h, flying, r, 'written across a sweep');
      await assertStored(t, h, kept, null, 'finished before the sweep');
      t.equal(await h.countStaging(), 0, 'staging is empty');

      if (h.plantStagingLitter === undefined) return;
      await h.plantStagingLitter();
      t.equal(await h.countStaging(), 1, 'crash litter planted');
      t.equal(await h.store.sweepStaging(3_600_000), 1, 'an hour-old sweep removes it');
      t.equal(await h.countStaging(), 0, 'staging is empty again');
      await assertStored(t, h, kept, null, 'finished objects survive the sweep');
    });

    await test('checkWritable resolves on a healthy store and leaves nothing', async (t, h) => {
      const staging = await h.countStaging();
      await t.resolves(h.store.checkWritable(), 'writable');
      t.equal(await h.countStaging(), staging, 'the probe leaves no litter');
      t.same([...(await listed(h.store))], [], 'nor an object');
      if (h.faulty === null) return;
      h.faulty.fail('checkWritable');
      t.ok(isInjectedFault(await caught(h.store.checkWritable())), 'a store that cannot write fails the probe');
      h.faulty.heal();
    });

    await test('faulty layer: failures leave nothing behind and the store stays usable', async (t, h) => {
      const faulty = h.faulty;
      if (faulty === null) {
        t.pass('no faulty layer in this stack');
        return;
      }
      const data = seededData('incompressible', FRAME_SIZE + 4097, 20);
      const oid = oidOf(data);
      const staging = await h.countStaging();
      for (const at of ['write', 'finish'] as const) {
        faulty.failWriteAfter(MIN_FRAMED_SIZE, at);
        const before = faulty.injected;
        const e = await caught(put(h.store, data));
        faulty.heal();
        t.ok(faulty.injected > before, `write fault shown at ${at}: it fired`);
        t.ok(isInjectedFault(e), `write fault shown at ${at}: the upload fails with it`);
        await assertNothingLeft(t, h, oid, staging, `write fault shown at ${at}`);
      }
      faulty.failFinish();
      t.ok(isInjectedFault(await caught(put(h.store, data))), 'a failing finish fails the upload');
      faulty.heal();
      await assertNothingLeft(t, h, oid, staging, 'after a failing finish');

      const r = await put(h.store, data);
      t.equal(r.created, true, 'healed: the same oid is then stored');
      await assertStored(t, h, data, r, 'after the faults');

      faulty.failOpen();
      t.ok(isInjectedFault(await caught(h.store.open(oid))), 'a failing open rejects');
      faulty.heal();
      faulty.failReadAfter(1000);
      const reader = await h.store.open(oid);
      t.ok(reader, 'opened');
      if (reader !== null) {
        t.ok(isInjectedFault(await caught(readRange(reader, 0, data.byteLength - 1))), 'a read failing mid-way rejects');
        faulty.heal();
        t.ok((await readRange(reader, 0, data.byteLength - 1)).equals(data), 'the same reader reads it whole once healed');
        await reader.close();
      }
      faulty.failDelete();
      t.ok(isInjectedFault(await caught(h.store.delete(oid))), 'a failing delete rejects');
      faulty.heal();
      t.ok((await readObject(h.store, oid))?.equals(data), 'and the object is still there');
      t.equal(await h.store.delete(oid), true, 'healed: delete works');
      await assertNothingLeft(t, h, oid, staging, 'after the delete');
    });
  });
}

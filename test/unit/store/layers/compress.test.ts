import { createHash, randomBytes } from 'node:crypto';
import { open } from 'node:fs/promises';
import t from 'tap';
import type { FrameCodec } from '../../../../src/format/frame-codec.js';
import { Codec, FRAME_SIZE, readFrameIndex } from '../../../../src/format/frame-format.js';
import { samplesShrink } from '../../../../src/format/frame-sample.js';
import { parseOid, type Oid } from '../../../../src/protocol/oid.js';
import { DiskBlobStore } from '../../../../src/store/disk.js';
import { CompressingBlobStore } from '../../../../src/store/layers/compress.js';
import { FaultyBlobStore } from '../../../../src/store/layers/faulty.js';
import { WorkerPool } from '../../../../src/workers/pool.js';
import { textLike } from '../../../helpers/data.js';
import { tmpDir } from '../../../helpers/start-server.js';

// The compress layer's own decisions, over the real disk backend: which frames are compressed, the
// order they reach the backend, and a failing backend. The conformance suite checks the contract.

const F = FRAME_SIZE;
const pool = new WorkerPool(2);
t.teardown(() => pool.close());

const oidOf = (b: Buffer): Oid => parseOid(createHash('sha256').update(b).digest('hex'))!;

/** The real pool, counting the frames that were really tried (attempt: true). */
function counting(): { codec: FrameCodec; tried: () => number } {
  let n = 0;
  return {
    codec: { compress: (task) => ((n += task.attempt ? 1 : 0), pool.compress(task)), decode: (task) => pool.decode(task) },
    tried: () => n,
  };
}

async function put(store: CompressingBlobStore, data: Buffer): Promise<Oid> {
  const oid = oidOf(data);
  const w = await store.createWriter(oid, { expectedSize: data.length });
  try {
    for (let at = 0; at < data.length; at += 256 << 10) {
      if (!w.write(data.subarray(at, at + (256 << 10)))) await new Promise<void>((resolve) => w.onDrain(resolve));
    }
    await w.finish();
  } catch (e) {
    await w.abort();
    throw e;
  }
  return oid;
}

t.test('samples: incompressible bytes are not worth a try, compressible ones anywhere in the frame are', async (t) => {
  t.equal(samplesShrink(randomBytes(F)), false, 'random');
  t.equal(samplesShrink(textLike(F)), true, 'text');
  t.equal(samplesShrink(Buffer.concat([randomBytes(F - (16 << 10)), Buffer.alloc(16 << 10)])), true, 'zeros only at the end');
  t.equal(samplesShrink(randomBytes(40 << 10)), true, 'a frame no bigger than the samples is simply tried');
});

t.test('random frames go in raw untried, text frames compressed, in order, and the object reads back', async (t) => {
  const disk = await DiskBlobStore.open(tmpDir());
  const { codec, tried } = counting();
  const store = new CompressingBlobStore(disk, codec, 3);
  const data = Buffer.concat([randomBytes(3 * F), textLike(2 * F), randomBytes(F + 5)]);
  const oid = await put(store, data);
  const fh = await open(disk.pathOf(oid), 'r');
  t.teardown(() => fh.close());
  const { size } = await fh.stat();
  const index = (await readFrameIndex(size, async (into, position) => void (await fh.read(into, 0, into.length, position))))!;
  t.ok(index !== null, 'stored framed');
  t.same(
    index.frames.map((e) => e.codec),
    [Codec.Raw, Codec.Raw, Codec.Raw, Codec.Zstd, Codec.Zstd, Codec.Raw, Codec.Raw],
    'random frames raw, text frames compressed',
  );
  t.ok(tried() >= 3 && tried() <= 5, `only frames whose samples shrink (or that follow a compressed one) were tried: ${tried()}`);
  const head = Buffer.alloc(F);
  await fh.read(head, 0, F, 0);
  t.ok(head.equals(data.subarray(0, F)), 'a raw frame is stored as it arrived, first');
  const r = (await store.open(oid))!;
  t.teardown(() => r.close());
  const got = Buffer.alloc(data.length);
  await r.readAt(got, 0);
  t.ok(got.equals(data), 'reads back byte for byte');
});

t.test('a backend that fails mid-object fails the write; nothing is left, nothing unhandled', async (t) => {
  const dir = tmpDir();
  const faulty = new FaultyBlobStore(await DiskBlobStore.open(dir));
  faulty.failWriteAfter(F + 10);
  const store = new CompressingBlobStore(faulty, pool, 3);
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown): void => void unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  t.teardown(() => process.off('unhandledRejection', onUnhandled));
  const data = Buffer.concat([randomBytes(2 * F), textLike(2 * F)]);
  await t.rejects(put(store, data), 'the write fails');
  t.equal(await store.open(oidOf(data)), null, 'nothing stored');
  await new Promise((resolve) => setImmediate(resolve));
  t.same(unhandled, [], 'no unhandled rejection');
});

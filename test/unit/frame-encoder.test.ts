import { createHash, randomBytes } from 'node:crypto';
import t from 'tap';
import { FRAME_SIZE } from '../../src/store/buffer-pool.js';
import { FrameEncoder } from '../../src/store/frame-encoder.js';
import { samplesShrink } from '../../src/store/frame-sample.js';
import { Codec } from '../../src/store/frame-format.js';
import { WorkerPool } from '../../src/workers/pool.js';
import { parseOid, type Oid } from '../../src/protocol/oid.js';
import { textLike } from '../helpers/data.js';

const F = FRAME_SIZE;
const pool = new WorkerPool(2);
t.teardown(() => pool.close());

const oidOf = (b: Buffer): Oid => parseOid(createHash('sha256').update(b).digest('hex'))!;

/** The real pool, counting the frames it is given (what the sampling spares it). */
function counting(): { pool: WorkerPool; tasks: () => number } {
  let n = 0;
  const counted = Object.create(pool) as WorkerPool;
  counted.compress = (task) => {
    n++;
    return pool.compress(task);
  };
  return { pool: counted, tasks: () => n };
}

async function feed(encoder: FrameEncoder, data: Buffer): Promise<void> {
  for (let at = 0; at < data.length; at += 256 << 10) {
    if (!encoder.write(data.subarray(at, at + (256 << 10)))) await new Promise<void>((resolve) => encoder.onDrain(resolve));
  }
}

t.test('samples: incompressible bytes are not worth a try, compressible ones anywhere in the frame are', async (t) => {
  t.equal(samplesShrink(randomBytes(F)), false, 'random');
  t.equal(samplesShrink(textLike(F)), true, 'text');
  t.equal(samplesShrink(Buffer.concat([randomBytes(F - (16 << 10)), Buffer.alloc(16 << 10)])), true, 'zeros only at the end');
  t.equal(samplesShrink(randomBytes(40 << 10)), true, 'a frame no bigger than the samples is simply tried');
});

t.test('untried frames skip the pool; compressible frames are compressed; every byte reaches the sink in order', async (t) => {
  const data = Buffer.concat([randomBytes(3 * F), textLike(2 * F), randomBytes(F + 5)]);
  const { pool: p, tasks } = counting();
  const parts: Buffer[] = [];
  const encoder = new FrameEncoder(oidOf(data), data.length, p, 3, async (stored) => void parts.push(Buffer.from(stored)), { deferRawDigests: true });
  await feed(encoder, data);
  const out = await encoder.end();
  t.same(
    out.entries.map((e) => e.codec),
    [Codec.Raw, Codec.Raw, Codec.Raw, Codec.Zstd, Codec.Zstd, Codec.Raw, Codec.Raw],
    'random frames raw, text frames compressed',
  );
  const deferred = out.entries.map((e) => e.digest === null);
  t.same(deferred.slice(0, 5), [true, true, true, false, false], 'random frames untried (digest deferred), text frames tried');
  t.equal(deferred[6], false, 'the 5-byte tail is too small to sample: tried');
  // Frame 5 (random) is tried without samples if frame 4's result was back by then (frames keep
  // compressing), or sampled and left untried if not: either way only tried frames cost the pool.
  t.equal(tasks(), deferred.filter((d) => !d).length, 'only the tried frames went to the pool');
  t.equal(out.framesLength, parts.reduce((n, b) => n + b.length, 0));
  t.ok(parts[0]!.equals(data.subarray(0, F)) && parts[2]!.equals(data.subarray(2 * F, 3 * F)), 'raw frames stored as they arrived, in order');
});

t.test('writes of consecutive frames overlap, and the encoder waits for all of them', async (t) => {
  const data = randomBytes(4 * F);
  const pending: (() => void)[] = [];
  let most = 0;
  let done = 0;
  const encoder = new FrameEncoder(oidOf(data), data.length, pool, 3, (stored) => {
    t.equal(stored.byteLength, F);
    return new Promise<void>((resolve) => {
      pending.push(() => {
        done++;
        resolve();
      });
      most = Math.max(most, pending.length);
      if (pending.length === 2) setTimeout(() => pending.splice(0).forEach((f) => f()), 5);
    });
  }, { deferRawDigests: true });
  const fed = feed(encoder, data);
  await fed;
  const ending = encoder.end();
  setTimeout(() => pending.splice(0).forEach((f) => f()), 20);
  await ending;
  t.equal(most, 2, 'a second frame went to the sink while the first was still being stored');
  t.equal(done, 4, 'end() resolved only after every write finished');
});

t.test('a failing sink fails the upload; nothing is left unhandled', async (t) => {
  const data = Buffer.concat([randomBytes(2 * F), textLike(2 * F)]);
  let calls = 0;
  const encoder = new FrameEncoder(oidOf(data), data.length, pool, 3, async () => {
    if (++calls === 2) throw new Error('disk on fire');
  }, { deferRawDigests: true });
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown): void => void unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  t.teardown(() => process.off('unhandledRejection', onUnhandled));
  await feed(encoder, data).catch(() => undefined);
  await t.rejects(encoder.end(), /disk on fire/);
  await encoder.abort();
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.same(unhandled, [], 'no unhandled rejection');
});

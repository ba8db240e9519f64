import { createHash, randomFillSync } from 'node:crypto';
import type { Test } from 'tap';
import type { ResumableHasher, StreamHasher } from '../../src/format/frame-codec.js';
import { AlignedBufferPool } from '../../src/store/buffer-pool.js';

/**
 * What every Hasher (the port large uploads and the maintenance jobs hash through) must do, whatever
 * runs it: hasher.test.ts runs this against each implementation. Buffers are 1 MiB views of shared,
 * aligned memory, as the verify layer hands them over.
 */
export interface HasherUnderTest {
  readonly hasher: ResumableHasher;
  close(): Promise<void>;
}

const BLOCK = 1 << 20;
const sha256 = (...parts: Uint8Array[]): string => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest('hex');
};

/**
 * Feeds `data` in 1 MiB views with at most `depth` outstanding, as the verify layer does; each view
 * goes back to the pool the moment its `done` runs and is overwritten by the next piece at once, so
 * a hasher still reading a buffer after `done` gets a wrong digest. Resolves with the order of `done`.
 */
async function feed(pool: AlignedBufferPool, stream: StreamHasher, data: Uint8Array, depth: number): Promise<number[]> {
  const order: number[] = [];
  let outstanding = 0;
  let wake: (() => void) | null = null;
  const all: Promise<void>[] = [];
  for (let i = 0, n = 0; i < data.length; i += BLOCK, n++) {
    while (outstanding >= depth) await new Promise<void>((r) => (wake = r));
    const view = pool.takeView();
    const part = data.subarray(i, i + BLOCK);
    view.set(part);
    outstanding++;
    const no = n;
    all.push(
      new Promise((resolve) =>
        stream.update(view.subarray(0, part.length), () => {
          order.push(no);
          view.fill(0xee); // as if the next upload's bytes were already in it
          pool.giveView(view);
          outstanding--;
          const w = wake;
          wake = null;
          w?.();
          resolve();
        }),
      ),
    );
  }
  await Promise.all(all);
  return order;
}

export async function hasherConformance(t: Test, name: string, make: () => HasherUnderTest): Promise<void> {
  await t.test(name, async (t) => {
    const pool = new AlignedBufferPool(BLOCK, { keep: 8, shared: true });
    const h = make();
    t.teardown(() => h.close());

    await t.test('digests equal sha256 of the bytes given, in order, across sizes', async (t) => {
      for (const size of [0, 1, 55, 64, 65_536, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 12_345]) {
        const data = randomFillSync(new Uint8Array(size));
        const s = h.hasher.open();
        await feed(pool, s, data, 4);
        t.equal(await s.digest(), sha256(data), `${size} bytes`);
      }
    });

    await t.test('each buffer is released once hashed, in the order given; a released buffer is never read again', async (t) => {
      const data = randomFillSync(new Uint8Array(12 * BLOCK + 7));
      const s = h.hasher.open();
      const order = await feed(pool, s, data, 2);
      t.same(order, Array.from({ length: 13 }, (_, i) => i), 'released in order');
      t.equal(await s.digest(), sha256(data), 'buffers overwritten as soon as they were released did not change the digest');
    });

    await t.test('streams hashed at the same time keep their own state', async (t) => {
      const a = randomFillSync(new Uint8Array(5 * BLOCK + 12_345));
      const b = randomFillSync(new Uint8Array(3 * BLOCK));
      const sa = h.hasher.open();
      const sb = h.hasher.open();
      await Promise.all([feed(pool, sa, a, 4), feed(pool, sb, b, 4)]);
      t.equal(await sa.digest(), sha256(a));
      t.equal(await sb.digest(), sha256(b));
      t.equal(await h.hasher.open().digest(), sha256(), 'a stream given nothing has the empty digest');
    });

    await t.test('the digest asked while updates are still queued covers all of them', async (t) => {
      const data = randomFillSync(new Uint8Array(6 * BLOCK));
      const s = h.hasher.open();
      const views: Buffer[] = [];
      let released = 0;
      for (let i = 0; i < data.length; i += BLOCK) {
        const v = pool.takeView();
        v.set(data.subarray(i, i + BLOCK));
        views.push(v);
        s.update(v, () => released++);
      }
      const hex = await s.digest(); // asked at once, before any update has finished
      t.equal(hex, sha256(data));
      t.equal(released, 6, 'every buffer released before the digest settles');
      for (const v of views) pool.giveView(v);
    });

    await t.test('a saved state goes on in a new stream to the digest of all the bytes, whatever the cut', async (t) => {
      const data = randomFillSync(new Uint8Array(3 * BLOCK + 100));
      // Cuts inside, at and around a 64-byte block, and past the first MiB views.
      for (const cut of [0, 1, 55, 63, 64, 65, 127, 1000, BLOCK, 2 * BLOCK + 77]) {
        const first = h.hasher.openResumable();
        await feed(pool, first, data.subarray(0, cut), 4);
        const saved = await first.snapshot();
        t.equal(saved.length, 40 + (cut % 64), `${cut}: chaining words, byte count and the unfinished block`);
        t.equal(await first.digest(), sha256(data.subarray(0, cut)), `${cut}: the stream saved from still digests its own bytes`);
        const next = h.hasher.openResumable(saved);
        await feed(pool, next, data.subarray(cut), 4);
        t.equal(await next.digest(), sha256(data), `${cut}: taken up from the saved state`);
      }
    });

    await t.test('a snapshot covers exactly the updates given before it, even while they are queued', async (t) => {
      const data = randomFillSync(new Uint8Array(4 * BLOCK));
      const s = h.hasher.openResumable();
      const views: Buffer[] = [];
      const snaps: Promise<Uint8Array>[] = [];
      for (let i = 0; i < 4; i++) {
        const v = pool.takeView();
        v.set(data.subarray(i * BLOCK, (i + 1) * BLOCK));
        views.push(v);
        s.update(v, () => undefined);
        snaps.push(s.snapshot()); // asked at once, the next update queued right behind it
      }
      const states = await Promise.all(snaps);
      t.equal(await s.digest(), sha256(data));
      for (const [i, state] of states.entries()) {
        const again = h.hasher.openResumable(state);
        await feed(pool, again, data.subarray((i + 1) * BLOCK), 4);
        t.equal(await again.digest(), sha256(data), `the snapshot after view ${i + 1} goes on from there`);
      }
      for (const v of views) pool.giveView(v);
    });

    await t.test('bytes that are not a saved state are refused with a RangeError', async (t) => {
      const good = h.hasher.openResumable();
      await feed(pool, good, new Uint8Array(70), 1);
      const saved = await good.snapshot();
      t.throws(() => h.hasher.openResumable(new Uint8Array(39)), RangeError, 'too short');
      t.throws(() => h.hasher.openResumable(saved.subarray(0, saved.length - 1)), RangeError, 'the unfinished block does not match the count');
      t.throws(() => h.hasher.openResumable(new Uint8Array(40 + 64)), RangeError, 'too long');
      good.drop();
    });

    await t.test('a dropped stream still releases every buffer it was given; the hasher carries on', async (t) => {
      const s = h.hasher.open();
      let released = 0;
      const all: Promise<void>[] = [];
      const views: Buffer[] = [];
      for (let i = 0; i < 4; i++) {
        const v = pool.takeView();
        views.push(v);
        all.push(new Promise((resolve) => s.update(v, () => {
          released++;
          resolve();
        })));
      }
      s.drop(); // an aborted upload, with four buffers still queued for hashing
      await Promise.all(all);
      t.equal(released, 4, 'all four released');
      for (const v of views) pool.giveView(v);
      const data = randomFillSync(new Uint8Array(2 * BLOCK));
      const next = h.hasher.open();
      await feed(pool, next, data, 4);
      t.equal(await next.digest(), sha256(data), 'a stream opened after it is hashed as usual');
    });
  });
}

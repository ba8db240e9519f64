import t from 'tap';
import {
  AlignedBufferPool,
  ChunkGatherer,
  IO_CHUNK,
  READ_SKEW,
  SizedBufferPool,
  directBuffers,
  giveReadBuffer,
  ioBuffers,
  isAlignedMemory,
  takeReadBuffer,
} from '../../../src/store/buffer-pool.js';

t.test('sized pool: power-of-two classes, reuse, bounded, foreign buffers ignored', async (t) => {
  const pool = new SizedBufferPool();
  const a = pool.take(65_600);
  t.equal(a.length, 65_600, 'exactly the length asked for');
  t.equal(a.buffer.byteLength, 128 << 10, 'from the 128 KiB class');
  t.equal(pool.take(0).buffer.byteLength, 4096, 'the smallest class serves empty objects');
  pool.give(a);
  const b = pool.take(100_000);
  t.equal(b.buffer, a.buffer, 'a given-back buffer is reused by its class');
  t.not(pool.take(100_000).buffer, a.buffer, 'and handed out once');

  const many = Array.from({ length: 100 }, () => pool.take(1 << 20));
  for (const m of many) pool.give(m);
  const kept = new Set(Array.from({ length: 100 }, () => pool.take(1 << 20).buffer));
  t.equal([...kept].filter((ab) => many.some((m) => m.buffer === ab)).length, 4, '1 MiB class keeps 4 MiB idle, no more');

  const offset = Buffer.from(new ArrayBuffer(8192), 10);
  const odd = Buffer.from(new ArrayBuffer(5000));
  pool.give(offset);
  pool.give(odd);
  const next = pool.take(5000).buffer;
  t.ok(next !== offset.buffer && next !== odd.buffer && next.byteLength === 8192, 'odd-sized or offset buffers never enter the pool');
});

t.test('aligned pool: page-aligned views, shared on request, reused, bounded', async (t) => {
  const pool = new AlignedBufferPool(1 << 20, { keep: 6 });
  const views = Array.from({ length: 8 }, () => pool.takeView());
  t.ok(views.every((v) => v.byteLength === 1 << 20 && isAlignedMemory(v)), 'every view is a whole, aligned MiB');
  t.equal(new Set(views.map((v) => v.buffer)).size, 8, 'each of its own memory, so a pooled buffer never keeps others alive');
  t.ok(views.every((v) => v.buffer instanceof ArrayBuffer), 'not shared unless asked');
  for (const v of views) pool.giveView(v);
  const again = Array.from({ length: 8 }, () => pool.takeView());
  t.equal(again.filter((v) => views.includes(v)).length, 6, 'idle views past `keep` are dropped, the rest reused');
  t.notOk(isAlignedMemory(new Uint8Array(1 << 20)), 'malloc-backed memory is never taken for aligned');
  t.notOk(isAlignedMemory(views[0]!.subarray(100)), 'nor an unaligned part of an aligned view');
  const shared = new AlignedBufferPool(2 << 20, { keep: 2, shared: true }).takeView();
  t.ok(shared.buffer instanceof SharedArrayBuffer && isAlignedMemory(shared), 'shared pools hand out aligned SharedArrayBuffer views');
  t.throws(() => new AlignedBufferPool(1000, { keep: 1 }), /64 KiB pages/);
});

t.test('gatherer copies chunks across buffer boundaries, into shared memory too', async (t) => {
  const pool = new AlignedBufferPool(64 << 10, { keep: 4, shared: true });
  const full: Buffer[] = [];
  const g = new ChunkGatherer(pool, (buf, len) => {
    full.push(Buffer.from(buf.subarray(0, len)));
    pool.giveView(buf);
  });
  const data = Buffer.from(Array.from({ length: 200_000 }, (_, i) => (i * 7) % 251));
  for (let at = 0; at < data.length; at += 30_001) g.add(data.subarray(at, at + 30_001));
  g.flush();
  t.same(full.map((b) => b.length), [65_536, 65_536, 65_536, 3_392], 'full buffers, then the rest');
  t.ok(Buffer.concat(full).equals(data), 'bytes in order, unchanged');
});

t.test("a download's read buffer: an upload's idle block if there is one, else a plain one past READ_SKEW", async (t) => {
  while (directBuffers.takeIdleView() !== null); // no idle upload block to begin with
  const plainIdle = ioBuffers.idle;
  const plain = takeReadBuffer();
  t.equal(plain.byteOffset, READ_SKEW, 'a plain buffer starts READ_SKEW bytes into its memory');
  t.equal(plain.byteLength, IO_CHUNK, 'and holds IO_CHUNK bytes');
  t.notOk(isAlignedMemory(plain), 'no aligned memory is mapped for a read');
  giveReadBuffer(plain);
  t.equal(ioBuffers.idle, plainIdle + 1, 'it goes back to the plain pool');
  const block = directBuffers.takeView();
  directBuffers.giveView(block);
  const read = takeReadBuffer();
  t.equal(read, block, "an upload's idle block is taken first");
  t.equal(directBuffers.idle, 0, 'out of the upload pool while read into');
  giveReadBuffer(read);
  t.equal(directBuffers.idle, 1, 'and back to the upload pool, not the plain one');
  t.equal(ioBuffers.idle, plainIdle + 1, 'the plain pool unchanged');
});

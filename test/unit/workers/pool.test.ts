import { blake3 } from '@napi-rs/blake-hash';
import t from 'tap';
import { WorkerPool } from '../../../src/workers/pool.js';
import { Codec, FRAME_SIZE } from '../../../src/format/frame-format.js';
import { blockPool, isAlignedMemory } from '../../../src/store/buffer-pool.js';
import { cappedHeld } from '../../helpers/wait-for.js';

const uploadFrames = blockPool(FRAME_SIZE);

t.test('a crashed worker fails its task cleanly and the pool carries on', async (t) => {
  const pool = new WorkerPool(2, new URL('../../fixtures/crash.worker.js', import.meta.url));
  t.teardown(() => pool.close());
  t.equal(await pool.run<number>('echo', { value: 21 }), 42);
  await t.rejects(pool.run('crash', {}), 'the crashed task rejects');
  await t.rejects(pool.run('fail', {}), /task failed on purpose/, 'a throwing task rejects with its error');
  const after = await Promise.all([1, 2, 3, 4].map((value) => pool.run<number>('echo', { value })));
  t.same(after, [2, 4, 6, 8], 'later tasks still run on replacement workers');
});

t.test('frame worker: compress then decode round-trips and catches damage', async (t) => {
  const pool = new WorkerPool(1);
  t.teardown(() => pool.close());
  const text = Buffer.from('vertex 1.0 2.0 3.0 normal 0 1 0\n'.repeat(20000));
  const input = new Uint8Array(1 << 22);
  input.set(text);
  const c = await pool.compress({ input, length: text.length, out: new ArrayBuffer((1 << 22) + 65536), level: 3, attempt: true });
  t.equal(c.codec, Codec.Zstd, 'text compresses');
  t.ok(c.storedLength < text.length / 10);
  t.equal(c.input.byteLength, 1 << 22, 'input buffer moved back');
  const stored = new ArrayBuffer(c.out.byteLength);
  new Uint8Array(stored).set(new Uint8Array(c.out, 0, c.storedLength));
  const d = await pool.decode({ stored, storedLength: c.storedLength, codec: c.codec, digest: c.digest, out: new ArrayBuffer(1 << 22), length: text.length });
  t.equal(d.damage, null);
  t.ok(Buffer.from(d.out, 0, text.length).equals(text), 'decoded bytes equal the original');
  const broken = new ArrayBuffer(c.out.byteLength);
  new Uint8Array(broken).set(new Uint8Array(c.out, 0, c.storedLength));
  new Uint8Array(broken)[10] ^= 1;
  const bad = await pool.decode({ stored: broken, storedLength: c.storedLength, codec: c.codec, digest: c.digest, out: new ArrayBuffer(1 << 22), length: text.length });
  t.match(bad.damage, /BLAKE3/, 'a flipped bit is detected before decompression');
  const random = new Uint8Array(1 << 22);
  (await import('node:crypto')).randomFillSync(random);
  const r = await pool.compress({ input: random, length: 1 << 20, out: new ArrayBuffer((1 << 22) + 65536), level: 3, attempt: true });
  t.equal(r.codec, Codec.Raw, 'incompressible frame stored raw');
  t.equal(r.storedLength, 1 << 20);
  // An upload's frames live in shared, aligned memory: the worker reads them in place.
  const textAgain = uploadFrames.takeView();
  textAgain.set(text);
  const skipped = await pool.compress({ input: textAgain, length: text.length, out: new ArrayBuffer((1 << 22) + 65536), level: 3, attempt: false });
  t.equal(skipped.codec, Codec.Raw, 'no attempt: stored raw even when it would shrink');
  t.equal(skipped.storedLength, text.length);
  t.ok(Buffer.from(skipped.digest).equals(blake3(text)), 'and its BLAKE3 is still taken, of the raw bytes');
  t.equal(textAgain.byteLength, 1 << 21, 'a shared frame stays usable here (nothing was moved away)');
  t.ok(Buffer.from(skipped.input.subarray(0, text.length)).equals(text), 'the worker saw it in place');
  t.ok(isAlignedMemory(textAgain), 'at an aligned address, so a raw frame can go to disk with O_DIRECT');
  uploadFrames.giveView(textAgain);
});

t.test('threads start with the first task and exit once idle: a pool at rest runs none', async (t) => {
  const pool = new WorkerPool(2, new URL('../../fixtures/crash.worker.js', import.meta.url), 20);
  t.teardown(() => pool.close());
  const events: string[] = [];
  let exited!: () => void;
  const allGone = new Promise<void>((resolve) => (exited = resolve));
  pool.onThreads((event, threads) => {
    events.push(event);
    if (event === 'exit' && threads === 0) exited();
  });
  t.equal(pool.stats.started, 0, 'no thread before the first task');
  t.equal(pool.stats.threads, 2, 'the pool\'s size is what the busy figures divide by');
  t.same(await Promise.all([1, 2, 3].map((value) => pool.run<number>('echo', { value }))), [2, 4, 6]);
  t.ok(pool.stats.started >= 1 && pool.stats.started <= 2, 'threads started on demand, no more than asked');
  await cappedHeld(allGone, 'the pool\'s threads to exit'); // the event, whenever the idle spell ends
  t.equal(pool.stats.started, 0, 'every thread let go after the idle spell');
  t.ok(events.includes('start'), 'each start is told');
  t.equal(await pool.run<number>('echo', { value: 5 }), 10, 'the next task starts a thread again');
});

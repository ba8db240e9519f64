import { createHash, randomFillSync } from 'node:crypto';
import t from 'tap';
import { AlignedBufferPool } from '../../src/store/buffer-pool.js';
import { HashThread } from '../../src/workers/hash-thread.js';
import { cappedHeld } from '../helpers/wait-for.js';

const pool = new AlignedBufferPool(1 << 20, { keep: 8, shared: true });

/** Feeds `data` to a stream in 1 MiB shared buffers, as the writers do; resolves with the order `done` ran in. */
async function feed(stream: ReturnType<HashThread['open']>, data: Buffer): Promise<number[]> {
  const order: number[] = [];
  const all: Promise<void>[] = [];
  for (let i = 0, n = 0; i < data.length; i += 1 << 20, n++) {
    const view = pool.takeView();
    const part = data.subarray(i, i + (1 << 20));
    view.set(part);
    all.push(new Promise((resolve) => stream.update(view.subarray(0, part.length), () => {
      order.push(n);
      pool.giveView(view);
      resolve();
    })));
  }
  await Promise.all(all);
  return order;
}

t.test('streams hash shared buffers in order, each its own', async (t) => {
  const ht = new HashThread();
  t.teardown(() => ht.close());
  const a = randomFillSync(Buffer.alloc(5 * (1 << 20) + 12345));
  const b = randomFillSync(Buffer.alloc(3 * (1 << 20)));
  const sa = ht.open();
  const sb = ht.open();
  const [orderA] = await Promise.all([feed(sa, a), feed(sb, b)]);
  t.same(orderA, [0, 1, 2, 3, 4, 5], 'each buffer is released once hashed, in order');
  t.equal(await sa.digest(), createHash('sha256').update(a).digest('hex'), 'interleaved streams keep their own state');
  t.equal(await sb.digest(), createHash('sha256').update(b).digest('hex'));
  const empty = ht.open();
  t.equal(await empty.digest(), createHash('sha256').digest('hex'), 'a stream given nothing has the empty digest');
});

t.test('a hash thread that dies fails its streams; the next stream gets a new thread', async (t) => {
  const ht = new HashThread();
  t.teardown(() => ht.close());
  const doomed = ht.open();
  await feed(doomed, Buffer.alloc(1 << 20, 1));
  let released = false;
  doomed.update(pool.takeView(), () => (released = true));
  const dying = ht.close(); // the thread exits with work pending
  const fresh = ht.open(); // opened while the old thread is still going away
  await dying;
  await t.rejects(doomed.digest(), /hash thread/, 'its digest fails: the upload is refused, never taken as verified');
  t.ok(released, 'buffers handed over are released anyway');
  const data = Buffer.alloc(2 << 20, 7);
  await feed(fresh, data);
  t.equal(await fresh.digest(), createHash('sha256').update(data).digest('hex'), 'a new thread serves the next upload, untouched by the old one\'s exit');
});

t.test('a dropped stream still releases every buffer it was given, once the thread is through with it', async (t) => {
  const ht = new HashThread();
  t.teardown(() => ht.close());
  const s = ht.open();
  let released = 0;
  for (let i = 0; i < 4; i++) s.update(pool.takeView(), () => released++);
  s.drop(); // an aborted upload, with four buffers still queued for hashing
  // The thread handles its messages in order and answers in order: by the time a stream opened
  // after the drop has its digest, the four buffers must be back, whatever the machine's load.
  const next = ht.open();
  const data = Buffer.alloc(1 << 20, 9);
  await feed(next, data);
  const hex = await next.digest();
  t.equal(released, 4, 'all four released before anything sent after the drop is answered');
  t.equal(hex, createHash('sha256').update(data).digest('hex'), 'and the thread carries on');
});

t.test('the thread starts with the first stream and exits once none has been open for the idle spell', async (t) => {
  const ht = new HashThread(20);
  t.teardown(() => ht.close());
  t.notOk(ht.running, 'no thread before the first stream');
  const exited = new Promise<void>((resolve) => ht.onExit(resolve));
  const s = ht.open();
  t.ok(ht.running, 'a stream starts it');
  const data = Buffer.alloc(1 << 20, 3);
  await feed(s, data);
  t.equal(await s.digest(), createHash('sha256').update(data).digest('hex'));
  await cappedHeld(exited, 'the hash thread to exit'); // the event: the idle spell ended and the thread exited
  t.notOk(ht.running, 'no thread once idle');
  const again = ht.open();
  await feed(again, data);
  t.equal(await again.digest(), createHash('sha256').update(data).digest('hex'), 'the next stream starts a new one');
});

t.test('warm() starts the thread ahead of its first stream; unused, it goes after its idle time', async (t) => {
  const ht = new HashThread(20);
  t.teardown(() => ht.close());
  t.notOk(ht.ready, 'no thread at first');
  const exited = new Promise<void>((resolve) => ht.onExit(resolve));
  await ht.warm();
  t.ok(ht.ready, 'up once warm() resolves');
  await exited; // the idle timer's doing: no stream was ever opened
  t.notOk(ht.running, 'a thread warmed for an upload that never came does not stay');
  const data = Buffer.alloc(1 << 20, 3);
  const s = ht.open();
  await feed(s, data);
  t.equal(await s.digest(), createHash('sha256').update(data).digest('hex'), 'the next stream starts a new one');
});

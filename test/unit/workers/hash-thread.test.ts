import { createHash } from 'node:crypto';
import t from 'tap';
import { AlignedBufferPool } from '../../../src/store/buffer-pool.js';
import { HashThread } from '../../../src/workers/hash-thread.js';
import { cappedHeld } from '../../helpers/wait-for.js';

// What every Hasher must do is in test/conformance/hasher.suite.ts; here, what is the thread's own:
// its death, its idle exit, warm().
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

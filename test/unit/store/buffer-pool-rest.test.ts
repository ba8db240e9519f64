import t from 'tap';
import { AlignedBufferPool, BufferPool, SizedBufferPool, onPoolsReleased } from '../../../src/store/buffer-pool.js';
import { cappedHeld } from '../../helpers/wait-for.js';

// Pools let their idle buffers go after a rest, and the process is asked to collect them once every
// pool rests (store/buffer-pool.ts). A file of its own: pools used by other tests in the same
// process would still be in use and hold the collection back.

t.test('pools give every idle buffer back once they have rested, and say so', async (t) => {
  t.teardown(() => onPoolsReleased(null));
  const aligned = new AlignedBufferPool(64 << 10, { keep: 4, restMs: 20 });
  const plain = new BufferPool(4096, 4, 20);
  const sized = new SizedBufferPool(20);
  const pools: [string, { readonly idle: number }, () => void][] = [
    ['aligned', aligned, () => aligned.giveView(aligned.takeView())],
    ['plain', plain, () => plain.give(plain.take())],
    ['sized', sized, () => sized.give(sized.take(70_000))],
  ];
  for (const [name, pool, burst] of pools) {
    const released = new Promise<void>((resolve) => onPoolsReleased(resolve));
    burst();
    t.equal(pool.idle, 1, `${name}: a burst leaves its buffer idle for the next one`);
    await cappedHeld(released, `the ${name} pool to release`); // the event, after the pool's rest
    t.equal(pool.idle, 0, `${name}: none kept once it rests`);
  }
  const first = aligned.takeView();
  aligned.giveView(first);
  t.equal(aligned.takeView(), first, 'a pool in use reuses as before');
});

t.test('a pool that rests while another is in use asks for no collection; the last one to rest does', async (t) => {
  t.teardown(() => onPoolsReleased(null));
  let collections = 0;
  let collected: () => void = () => undefined;
  onPoolsReleased(() => {
    collections++;
    collected();
  });
  const resting = new BufferPool(4096, 4, 20);
  const busy = new SizedBufferPool(20);
  resting.give(resting.take());
  // The busy pool is used on every turn of the event loop (each of its rests sees a use) until the
  // other one has let its buffer go.
  await new Promise<void>((resolve) => {
    const turn = (): void => {
      busy.give(busy.take(5000));
      if (resting.idle === 0) resolve();
      else setImmediate(turn);
    };
    turn();
  });
  t.equal(busy.idle, 1, 'the pool in use keeps its buffer');
  // The collection would follow the release in a timer of its own: let any such timer run.
  await new Promise((r) => setTimeout(r, 1));
  t.equal(collections, 0, 'no collection while a pool is in use');
  await cappedHeld(new Promise<void>((resolve) => (collected = resolve)), 'the busy pool to rest');
  t.equal(busy.idle, 0, 'the busy pool let its buffer go once it rested');
  t.equal(collections, 1, 'and the collection came then, once');
});

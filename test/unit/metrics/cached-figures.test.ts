import t from 'tap';
import { CachedFigures } from '../../../src/metrics/cached-figures.js';

// The store gauges' cache: at most one read a minute, and one read however many ask at once.
t.test('single-flight and at most once per max age', async (t) => {
  let now = 1_000_000;
  let reads = 0;
  let release: (() => void) | null = null;
  const cache = new CachedFigures(async () => {
    reads++;
    await new Promise<void>((r) => (release = r));
    return reads;
  }, 60_000, () => now);
  const first = Promise.all([cache.get(), cache.get(), cache.get()]);
  await new Promise((r) => setImmediate(r));
  t.equal(reads, 1, 'three concurrent asks, one read');
  release!();
  t.same(await first, [1, 1, 1], 'all get its answer');
  now += 59_999;
  t.equal(await cache.get(), 1, 'fresh within the minute: no read');
  t.equal(reads, 1);
  now += 1;
  const next = cache.get();
  await new Promise((r) => setImmediate(r));
  release!();
  t.equal(await next, 2, 'a minute later: read again');
});

t.test('a failed read is not cached', async (t) => {
  let fail = true;
  const cache = new CachedFigures(() => {
    if (fail) throw new Error('db busy');
    return 7;
  }, 60_000);
  await t.rejects(cache.get(), /db busy/);
  fail = false;
  t.equal(await cache.get(), 7, 'the next ask reads again');
});

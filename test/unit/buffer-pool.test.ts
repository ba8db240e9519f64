import t from 'tap';
import { SizedBufferPool } from '../../src/store/buffer-pool.js';

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

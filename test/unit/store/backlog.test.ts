import t from 'tap';
import { Backlog } from '../../../src/store/backlog.js';

t.test('backlog: full at max, a buffer is free after all its parts, drain runs once there is room', async (t) => {
  const b = new Backlog(2);
  let drains = 0;
  const freed: string[] = [];
  b.onDrain(() => drains++);
  t.notOk(b.full(), 'empty');
  const a = b.add(2, () => freed.push('a'));
  const c = b.add(1, () => freed.push('c'));
  t.ok(b.full(), 'two outstanding of two');
  a();
  t.same(freed, [], 'one part of two done: not free yet');
  t.equal(drains, 0);
  a();
  t.same(freed, ['a'], 'free after its last part');
  t.equal(drains, 1, 'the waiting writer is told once');
  c();
  t.equal(drains, 1, 'no drain when nobody waits');
  t.notOk(b.full());
});

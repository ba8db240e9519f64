import t from 'tap';
import { bytes, duration, Paint, table } from '../../../src/cli/output.js';
import { ProgressView, type JobProgressView } from '../../../src/cli/progress.js';

// The CLI's output for people: binary units, colour rules, and a progress line that is redrawn in
// place and never wider than the terminal (a wrapped line leaves a trail of copies behind).

const GiB = 1024 ** 3;
const job = (done: number, state = 'running'): JobProgressView => ({
  id: 'abc',
  kind: 'audit',
  repository: 'acme/game',
  state,
  objects_done: Math.floor(done / GiB),
  objects_total: 9,
  bytes_done: done,
  bytes_total: 2.7 * GiB,
  started_at: new Date(Date.now() - 9000).toISOString(),
});

function stream(isTTY: boolean, columns: number) {
  const writes: string[] = [];
  return { writes, s: { isTTY, columns, write: (c: string) => (writes.push(c), true) } };
}

t.test('sizes in binary units, durations, tables', async (t) => {
  t.equal(bytes(512), '512 B');
  t.equal(bytes(1536), '1.50 KiB');
  t.equal(bytes(2.7 * GiB), '2.70 GiB');
  t.equal(bytes(183 * 1024 * 1024), '183 MiB');
  t.equal(bytes(null), '?');
  t.equal(duration(42), '42s');
  t.equal(duration(185), '3m05s');
  t.equal(duration(3720), '1h02m');
  t.equal(table(['ID', 'N'], [['a', '5'], ['bbb', '10']], new Set([1])), 'ID    N\na     5\nbbb  10\n');
});

t.test('colour only on a terminal, never with NO_COLOR', async (t) => {
  t.equal(new Paint({ isTTY: true }, {}).red('x'), '\x1b[31mx\x1b[0m');
  t.equal(new Paint({ isTTY: true }, { NO_COLOR: '1' }).red('x'), 'x');
  t.equal(new Paint({ isTTY: false }, {}).red('x'), 'x');
  t.equal(new Paint({ isTTY: true }, { TERM: 'dumb' }).red('x'), 'x');
});

t.test('on a terminal: one line redrawn in place within the width', async (t) => {
  for (const columns of [40, 60, 120]) {
    const { writes, s } = stream(true, columns);
    const v = new ProgressView(s);
    for (const f of [0, 0.1, 0.4, 0.9]) v.show(job(f * 2.7 * GiB));
    t.equal(writes.length, 4);
    for (const w of writes) {
      t.match(w, /^\r[^\n\r]*\x1b\[K$/, 'carriage return, one line, erase to its end');
      t.ok(w.length - '\r\x1b[K'.length <= columns - 1, `fits ${columns} columns: ${JSON.stringify(w)}`);
    }
    t.match(writes[3], /\d+%/);
    if (columns >= 120) t.match(writes[3], /GiB \/ 2\.70 GiB .*elapsed/, 'a wide terminal shows bytes, rate, ETA and elapsed');
    v.end();
    t.equal(writes.at(-1), '\n', 'the line is ended once');
  }
});

t.test('without a terminal: plain lines, at the first figures and at each change of state', async (t) => {
  const { writes, s } = stream(false, 0);
  const v = new ProgressView(s);
  v.show(job(GiB));
  v.show(job(1.1 * GiB)); // same state, within the interval: no line
  v.show(job(2.7 * GiB, 'done'));
  t.equal(writes.length, 2);
  t.match(writes[0], /^audit acme\/game: running, 37%, 1\.00 GiB \/ 2\.70 GiB, .*9s elapsed, 1\/9 objects\n$/);
  t.match(writes[1], /^audit acme\/game: done, 100%, 2\.70 GiB \/ 2\.70 GiB/);
  t.notMatch(writes.join(''), /\r|\x1b/);
  v.end();
  t.equal(writes.length, 2, 'nothing to end');
});

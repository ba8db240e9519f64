import t from 'tap';
import { isLfsError } from '../../../src/errors/errors.js';
import {
  DEFAULT_LOCK_PAGE,
  MAX_LOCK_PAGE,
  formatLockedAt,
  isLockId,
  normaliseLockPath,
  parseCreateLockRequest,
  parseCursor,
  parseLimit,
  parseListLocksQuery,
  parseUnlockRequest,
  parseVerifyLocksRequest,
} from '../../../src/protocol/locks.js';

/** Runs `fn` and returns the LfsError code and status it threw (or fails the test). */
function thrown(fn: () => unknown): { code: string; status: number; message: string } {
  try {
    fn();
  } catch (e) {
    if (isLfsError(e)) return { code: e.code, status: e.status, message: e.message };
    throw e;
  }
  throw new Error('expected an LfsError');
}

t.test('lock paths normalise to one spelling', async (t) => {
  const cases: [string, string][] = [
    ['a.bin', 'a.bin'],
    ['dir/a.bin', 'dir/a.bin'],
    ['./dir/a.bin', 'dir/a.bin'],
    ['dir//a.bin', 'dir/a.bin'],
    ['dir/./a.bin', 'dir/a.bin'],
    ['dir/sub/../a.bin', 'dir/a.bin'],
    ['dir\\a.bin', 'dir/a.bin'],
    ['dir/', 'dir'],
    ['Dir/A.BIN', 'Dir/A.BIN'], // case kept: paths are case-sensitive
    ['ünïcode/файл.psd', 'ünïcode/файл.psd'],
    ['with space/a b.bin', 'with space/a b.bin'],
  ];
  for (const [input, want] of cases) t.equal(normaliseLockPath(input), want, JSON.stringify(input));
});

t.test('bad lock paths are refused with 422', async (t) => {
  const bad: unknown[] = ['', '.', './', '/', '//', '/etc/passwd', '\\abs', 'C:/x.bin', 'c:\\x.bin', '..', '../x', 'a/../../x', 'a\0b', 42, null, {}, 'x'.repeat(4097)];
  for (const input of bad) {
    const e = thrown(() => normaliseLockPath(input));
    t.equal(e.status, 422, `${JSON.stringify(input)?.slice(0, 40)} → 422`);
    t.equal(e.code, 'LFS_ERR_LOCK_BAD_PATH');
    t.ok(e.message.length > 0);
  }
});

t.test('limit: default, clamp, refuse', async (t) => {
  t.equal(parseLimit(undefined), DEFAULT_LOCK_PAGE);
  t.equal(parseLimit(null), DEFAULT_LOCK_PAGE);
  t.equal(parseLimit(''), DEFAULT_LOCK_PAGE);
  t.equal(parseLimit('7'), 7);
  t.equal(parseLimit(7), 7);
  t.equal(parseLimit('5000'), MAX_LOCK_PAGE);
  for (const bad of ['0', '-1', 'abc', '1.5', '1e3', 0, -3, 2.5, true, '99999999999999999999']) {
    t.equal(thrown(() => parseLimit(bad)).status, 422, `limit ${JSON.stringify(bad)}`);
  }
});

t.test('cursor: only what the server hands out', async (t) => {
  t.equal(parseCursor(undefined), null);
  t.equal(parseCursor(''), null);
  t.equal(parseCursor('42'), 42);
  for (const bad of ['x', '-1', '1.0', 12, '99999999999999999999']) t.equal(thrown(() => parseCursor(bad)).status, 422, `cursor ${JSON.stringify(bad)}`);
});

t.test('lock ids are URL-safe', async (t) => {
  t.ok(isLockId('aZ09_-'));
  for (const bad of ['', 'a/b', 'a b', 'a%2F', 'a.b', 'x'.repeat(65)]) t.notOk(isLockId(bad), JSON.stringify(bad));
});

t.test('locked_at is RFC 3339 with second precision', async (t) => {
  t.equal(formatLockedAt(Date.UTC(2016, 4, 17, 15, 49, 6, 789)), '2016-05-17T15:49:06Z');
  t.match(formatLockedAt(Date.now()), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
});

t.test('request bodies', async (t) => {
  t.same(parseCreateLockRequest({ path: './a.bin', ref: { name: 'refs/heads/main' } }), { path: 'a.bin', refName: 'refs/heads/main' });
  // 3.3.0 sends "ref":{} when it knows no upstream (locking/api.go).
  t.same(parseCreateLockRequest({ path: 'a.bin', ref: {} }), { path: 'a.bin', refName: null });
  t.equal(thrown(() => parseCreateLockRequest({})).status, 422);
  t.equal(thrown(() => parseCreateLockRequest([])).status, 422);
  t.equal(thrown(() => parseCreateLockRequest({ path: 'a', ref: 'main' })).status, 422);
  t.equal(thrown(() => parseCreateLockRequest({ path: 'a', ref: { name: 3 } })).status, 422);

  t.same(parseUnlockRequest({ force: true, ref: { name: 'refs/heads/x' } }), { force: true, refName: 'refs/heads/x' });
  t.same(parseUnlockRequest(undefined), { force: false, refName: null });
  t.equal(thrown(() => parseUnlockRequest({ force: 'yes' })).status, 422);

  t.same(parseVerifyLocksRequest({ ref: { name: 'refs/heads/main' } }), { refName: 'refs/heads/main', cursor: null, limit: DEFAULT_LOCK_PAGE });
  t.same(parseVerifyLocksRequest({ cursor: '5', limit: 2 }), { refName: null, cursor: 5, limit: 2 });
  t.equal(thrown(() => parseVerifyLocksRequest({ limit: 'many' })).status, 422);
  t.equal(thrown(() => parseVerifyLocksRequest('x')).status, 422);
});

t.test('list query', async (t) => {
  t.same(parseListLocksQuery(''), { path: null, id: null, cursor: null, limit: DEFAULT_LOCK_PAGE, refspec: null });
  t.same(parseListLocksQuery('path=.%2Fdir%2F%2Fa.bin&id=abc&cursor=3&limit=10&refspec=refs%2Fheads%2Fmain'), {
    path: 'dir/a.bin',
    id: 'abc',
    cursor: 3,
    limit: 10,
    refspec: 'refs/heads/main',
  });
  t.equal(thrown(() => parseListLocksQuery('limit=0')).status, 422);
  t.equal(thrown(() => parseListLocksQuery('path=%2Fetc%2Fpasswd')).status, 422);
  t.equal(thrown(() => parseListLocksQuery('path=a%00b')).status, 422);
});

import { rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { NewLock } from '../../../src/db/index-types.js';
import { openSqliteIndex } from '../../../src/db/sqlite/sqlite-index.js';
import { tmpDir } from '../../helpers/start-server.js';

// The lock table on a real SQLite file: the unique (repo, path) index, stale takeover in one
// transaction, repository scoping of ids, and paging keys that survive deletes.

const dir = tmpDir('stowage-locks-repo-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const file = join(dir, 'index.sqlite');
const db = openSqliteIndex(file);
t.teardown(() => db.close());
const repo = db.locks;

let n = 0;
const lock = (path: string, owner = 'u1', extra: Partial<NewLock> = {}): NewLock => ({
  id: `id${++n}`,
  repo: 'org/a',
  path,
  ref: 'refs/heads/main',
  ownerId: owner,
  ownerName: `name-${owner}`,
  lockedAt: Date.now(),
  ...extra,
});

t.test('one lock per (repo, path); case-sensitive; other repos independent', async (t) => {
  const first = (await repo.create(lock('a.bin'), null));
  t.equal(first.kind, 'created');
  const second = (await repo.create(lock('a.bin', 'u2'), null));
  t.equal(second.kind, 'conflict');
  if (second.kind === 'conflict' && first.kind === 'created') t.equal(second.existing.id, first.lock.id);
  t.equal((await repo.create(lock('A.bin'), null)).kind, 'created', 'case differs');
  t.equal((await repo.create(lock('a.bin', 'u1', { repo: 'org/b' }), null)).kind, 'created', 'other repository');
  t.equal((await repo.count('org/a')), 2);
});

t.test('ids are scoped to their repository', async (t) => {
  const made = (await repo.create(lock('scoped.bin', 'u1', { repo: 'org/b' }), null));
  t.equal(made.kind, 'created');
  const id = made.kind === 'created' ? made.lock.id : '';
  t.equal((await repo.findById('org/a', id)), null, 'not found from another repository');
  t.equal((await repo.delete('org/a', id)), false, 'not deletable from another repository');
  t.equal((await repo.findById('org/b', id))?.path, 'scoped.bin');
  t.equal((await repo.delete('org/b', id)), true);
  t.equal((await repo.delete('org/b', id)), false, 'gone');
});

t.test('a lock older than staleBefore is replaced in the same transaction', async (t) => {
  const old = (await repo.create(lock('stale.bin', 'u1', { lockedAt: Date.now() - 10_000 }), null));
  t.equal(old.kind, 'created');
  t.equal((await repo.create(lock('stale.bin', 'u2'), Date.now() - 60_000)).kind, 'conflict', 'not stale yet');
  t.equal((await repo.create(lock('stale.bin', 'u2'), null)).kind, 'conflict', 'null: never stale');
  const taken = (await repo.create(lock('stale.bin', 'u2'), Date.now() - 5_000));
  t.equal(taken.kind, 'taken_over');
  if (taken.kind === 'taken_over') {
    t.equal(taken.previous.ownerId, 'u1');
    t.equal(taken.lock.ownerId, 'u2');
  }
  t.equal((await repo.findByPath('org/a', 'stale.bin'))?.ownerId, 'u2');
});

t.test('a second connection to the same file sees the lock (cross-process exclusivity)', async (t) => {
  const other = openSqliteIndex(file);
  t.teardown(() => other.close());
  const otherRepo = other.locks;
  t.equal((await repo.create(lock('shared.bin'), null)).kind, 'created');
  const clash = (await otherRepo.create(lock('shared.bin', 'u9'), null));
  t.equal(clash.kind, 'conflict');
});

t.test('paging keys are never reused, so cursors survive deletes', async (t) => {
  const rows = [];
  for (let i = 0; i < 5; i++) {
    const r = (await repo.create(lock(`page/${i}`, 'u1', { repo: 'org/p' }), null));
    if (r.kind === 'created') rows.push(r.lock);
  }
  const first = (await repo.page('org/p', 0, 2));
  t.same(first.map((r) => r.path), ['page/0', 'page/1']);
  // Delete the newest lock and create one: AUTOINCREMENT never hands its seq out again.
  (await repo.delete('org/p', rows[4]!.id));
  const fresh = (await repo.create(lock('page/5', 'u1', { repo: 'org/p' }), null));
  t.equal(fresh.kind, 'created');
  if (fresh.kind === 'created') t.ok(fresh.lock.seq > rows[4]!.seq, 'seq not reused');
  (await repo.delete('org/p', rows[2]!.id));
  const rest = (await repo.page('org/p', first[1]!.seq, 10));
  t.same(rest.map((r) => r.path), ['page/3', 'page/5']);
});

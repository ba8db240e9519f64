import { rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { openDatabase } from '../../src/db/database.js';
import { LocksRepo, type NewLock } from '../../src/db/locks-repo.js';
import { tmpDir } from '../helpers/start-server.js';

// The lock table on a real SQLite file: the unique (repo, path) index, stale takeover in one
// transaction, repository scoping of ids, and paging keys that survive deletes.

const dir = tmpDir('stowage-locks-repo-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const file = join(dir, 'index.sqlite');
const db = openDatabase(file);
t.teardown(() => db.close());
const repo = new LocksRepo(db);

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
  const first = repo.create(lock('a.bin'), null);
  t.equal(first.kind, 'created');
  const second = repo.create(lock('a.bin', 'u2'), null);
  t.equal(second.kind, 'conflict');
  if (second.kind === 'conflict' && first.kind === 'created') t.equal(second.existing.id, first.lock.id);
  t.equal(repo.create(lock('A.bin'), null).kind, 'created', 'case differs');
  t.equal(repo.create(lock('a.bin', 'u1', { repo: 'org/b' }), null).kind, 'created', 'other repository');
  t.equal(repo.count('org/a'), 2);
});

t.test('ids are scoped to their repository', async (t) => {
  const made = repo.create(lock('scoped.bin', 'u1', { repo: 'org/b' }), null);
  t.equal(made.kind, 'created');
  const id = made.kind === 'created' ? made.lock.id : '';
  t.equal(repo.findById('org/a', id), null, 'not found from another repository');
  t.equal(repo.delete('org/a', id), false, 'not deletable from another repository');
  t.equal(repo.findById('org/b', id)?.path, 'scoped.bin');
  t.equal(repo.delete('org/b', id), true);
  t.equal(repo.delete('org/b', id), false, 'gone');
});

t.test('a lock older than staleBefore is replaced in the same transaction', async (t) => {
  const old = repo.create(lock('stale.bin', 'u1', { lockedAt: Date.now() - 10_000 }), null);
  t.equal(old.kind, 'created');
  t.equal(repo.create(lock('stale.bin', 'u2'), Date.now() - 60_000).kind, 'conflict', 'not stale yet');
  t.equal(repo.create(lock('stale.bin', 'u2'), null).kind, 'conflict', 'null: never stale');
  const taken = repo.create(lock('stale.bin', 'u2'), Date.now() - 5_000);
  t.equal(taken.kind, 'taken_over');
  if (taken.kind === 'taken_over') {
    t.equal(taken.previous.ownerId, 'u1');
    t.equal(taken.lock.ownerId, 'u2');
  }
  t.equal(repo.findByPath('org/a', 'stale.bin')?.ownerId, 'u2');
});

t.test('a second connection to the same file sees the lock (cross-process exclusivity)', async (t) => {
  const other = openDatabase(file);
  t.teardown(() => other.close());
  const otherRepo = new LocksRepo(other);
  t.equal(repo.create(lock('shared.bin'), null).kind, 'created');
  const clash = otherRepo.create(lock('shared.bin', 'u9'), null);
  t.equal(clash.kind, 'conflict');
});

t.test('paging keys are never reused, so cursors survive deletes', async (t) => {
  const rows = [];
  for (let i = 0; i < 5; i++) {
    const r = repo.create(lock(`page/${i}`, 'u1', { repo: 'org/p' }), null);
    if (r.kind === 'created') rows.push(r.lock);
  }
  const first = repo.page('org/p', 0, 2);
  t.same(first.map((r) => r.path), ['page/0', 'page/1']);
  // Delete the newest lock and create one: AUTOINCREMENT never hands its seq out again.
  repo.delete('org/p', rows[4]!.id);
  const fresh = repo.create(lock('page/5', 'u1', { repo: 'org/p' }), null);
  t.equal(fresh.kind, 'created');
  if (fresh.kind === 'created') t.ok(fresh.lock.seq > rows[4]!.seq, 'seq not reused');
  repo.delete('org/p', rows[2]!.id);
  const rest = repo.page('org/p', first[1]!.seq, 10);
  t.same(rest.map((r) => r.path), ['page/3', 'page/5']);
});

import { createHash } from 'node:crypto';
import type { Test } from 'tap';
import { HISTOGRAM_BOUNDS, NODE_STALE_MS, QuarantinedCopy, SettingsChanged, SweepMissed, type Index, type NewLock, type StatsSample } from '../../src/db/index-types.js';
import { parseOid, type Oid } from '../../src/protocol/oid.js';

/**
 * The Index conformance suite: what every implementation of src/db/index-types.ts must do, asserted
 * through that contract alone (the SQLite behaviour the server was built on is the reference).
 * index.test.ts runs it against each implementation. Each case gets a fresh, empty database; cases
 * that race open several instances on it, as several nodes (or processes) would.
 */

/** One fresh, empty database of the implementation under test. */
export interface IndexTarget {
  /** Opens one more instance on this database (each one its own connections, as another node). */
  open(log?: (msg: string, fields: object) => void): Promise<Index>;
  /** Removes the database once every instance is closed. */
  remove(): Promise<void>;
}

/** Makes a fresh, empty database. */
export type MakeTarget = () => Promise<IndexTarget>;

let seed = 0;
/** A distinct, valid oid per call. */
const newOid = (label = ''): Oid => parseOid(createHash('sha256').update(`${label}/${++seed}/${process.pid}`).digest('hex'))!;

let lockIds = 0;
const lock = (repo: string, path: string, owner = 'u1', extra: Partial<NewLock> = {}): NewLock => ({
  id: `lock-${process.pid}-${++lockIds}`,
  repo,
  path,
  ref: 'refs/heads/main',
  ownerId: owner,
  ownerName: `name-${owner}`,
  lockedAt: Date.now(),
  ...extra,
});

const sample = (at: number, extra: Partial<StatsSample> = {}): StatsSample => ({
  at,
  repositories: 1,
  objects: 2,
  logicalBytes: 300,
  storedBytes: 200,
  uploads: 1,
  uploadBytes: 100,
  downloads: 2,
  downloadBytes: 50,
  rejections: {},
  ...extra,
});

export async function indexConformance(t: Test, name: string, make: MakeTarget): Promise<void> {
  await t.test(name, async (t) => {
    /** A case on a fresh database; `ix` is its first instance, `more(n)` opens n more on the same database. */
    const test = async (title: string, fn: (t: Test, ix: Index, more: (n: number) => Promise<Index[]>, target: IndexTarget) => Promise<void>): Promise<void> => {
      await t.test(title, async (t) => {
        const target = await make();
        const opened: Index[] = [];
        t.teardown(async () => {
          for (const i of opened) await i.close();
          await target.remove();
        });
        const ix = await target.open();
        opened.push(ix);
        const more = async (n: number): Promise<Index[]> => {
          const made = await Promise.all(Array.from({ length: n }, () => target.open()));
          opened.push(...made);
          return made;
        };
        await fn(t, ix, more, target);
      });
    };

    await test('objects: proof of possession, shared lookup, hasAny', async (t, ix) => {
      const o = newOid();
      t.equal(await ix.objects.hasAny(), false, 'an empty index knows no object');
      t.equal(await ix.objects.findInRepo('acme/a', o), null);
      await ix.objects.addReference('acme/a', o, 1000, 600);
      t.same(await ix.objects.findInRepo('acme/a', o), { oid: o, size: 1000, storedSize: 600 }, 'the uploading repository sees it');
      t.equal(await ix.objects.findInRepo('acme/b', o), null, 'another repository does not (it never proved it has the bytes)');
      t.same(await ix.objects.findShared(o), { oid: o, size: 1000, storedSize: 600 }, 'the shared store knows it');
      t.equal(await ix.objects.hasAny(), true);
      const q = newOid();
      await ix.objects.addReference('acme/a', q, 5, 5);
      await ix.maintenance.quarantine(q, 'acme/a', 'corrupt');
      const other = newOid();
      await ix.objects.addReference('acme/b', other, 7, 7);
      const many = await ix.objects.findManyInRepo('acme/a', [o, q, other, newOid()]);
      t.same([...many.entries()], [[o, { oid: o, size: 1000, storedSize: 600 }]], 'findManyInRepo: only what the repository holds, not quarantined');
      t.equal((await ix.objects.findManyInRepo('acme/a', [])).size, 0, 'no oids, no rows');
      await ix.objects.addReference('acme/b', o, 1000, 600);
      t.ok(await ix.objects.findInRepo('acme/b', o), 'a second repository that uploads it sees it');
      await ix.objects.addReference('acme/a', o, 1000, 600);
      t.equal((await ix.maintenance.repoObjects('acme/a')).filter((r) => r.oid === o).length, 1, 'adding a reference twice keeps one');
      await ix.objects.setStoredSize(o, 321);
      t.equal((await ix.objects.findShared(o))!.storedSize, 321, 'setStoredSize');
      t.equal((await ix.objects.findInRepo('acme/b', o))!.storedSize, 321, 'one stored size, whichever repository asks');
    });

    await test('quarantine: hides the object, lifted by addReference (new sizes), not by restoreReference', async (t, ix) => {
      const o = newOid();
      await ix.objects.addReference('acme/a', o, 10, 10);
      t.equal(await ix.objects.isQuarantined(o), false);
      await ix.maintenance.quarantine(o, 'acme/a', 'corrupt');
      await ix.maintenance.quarantine(o, 'acme/a', 'again'); // a second mark is no error
      t.equal(await ix.objects.isQuarantined(o), true);
      t.equal(await ix.objects.findInRepo('acme/a', o), null, 'quarantined: missing to batch and downloads');
      t.ok(await ix.objects.findShared(o), 'the row is still there');
      t.equal((await ix.maintenance.repoObjects('acme/a'))[0]!.quarantined, true);
      t.equal(await ix.stats.quarantinedTotal(), 1);
      await ix.objects.restoreReference('acme/a', o, 10, 10);
      await ix.objects.restoreReference('acme/c', o, 10, 10);
      t.equal(await ix.objects.isQuarantined(o), true, 'journal replay proves nothing about the bytes');
      t.equal(await ix.objects.findInRepo('acme/c', o), null, 'restored reference, still quarantined');
      await ix.objects.addReference('acme/a', o, 10, 8);
      t.equal(await ix.objects.isQuarantined(o), false, 'good bytes uploaded again lift the mark');
      t.same(await ix.objects.findInRepo('acme/a', o), { oid: o, size: 10, storedSize: 8 }, 'and the row describes the new copy');
      t.equal(await ix.stats.quarantinedTotal(), 0);
    });

    await test('quarantine: lifting one mark leaves the others, dropping one too', async (t, ix) => {
      const [a, b, c] = [newOid(), newOid(), newOid()];
      for (const o of [a, b, c]) await ix.objects.addReference('acme/q', o, 10, 10);
      t.equal(await ix.objects.isQuarantined(a), false, 'nothing marked yet');
      await ix.maintenance.quarantine(a, 'acme/q', 'corrupt');
      await ix.maintenance.quarantine(b, 'acme/q', 'corrupt');
      await ix.objects.addReference('acme/q', a, 10, 10);
      t.equal(await ix.objects.isQuarantined(a), false, 'a: lifted by good bytes');
      t.equal(await ix.objects.isQuarantined(b), true, 'b: still marked after a was lifted');
      await ix.maintenance.quarantine(c, 'acme/q', 'corrupt');
      t.equal(await ix.maintenance.dropReference('acme/q', c, Date.now() - NODE_STALE_MS, 'node-q'), 'delete', 'c: its last reference dropped');
      t.equal(await ix.objects.isQuarantined(b), true, 'b: still marked after c went');
      await ix.objects.addReference('acme/q', b, 10, 10);
      t.equal(await ix.objects.isQuarantined(b), false, 'b: lifted');
      await ix.maintenance.quarantine(a, 'acme/q', 'corrupt again');
      t.equal(await ix.objects.isQuarantined(a), true, 'a: marked again after the table was empty');
    });

    await test('restoreReference: puts back a lost reference, leaves an existing one as it is', async (t, ix) => {
      const o = newOid();
      await ix.objects.restoreReference('acme/a', o, 50, 40);
      t.same(await ix.objects.findInRepo('acme/a', o), { oid: o, size: 50, storedSize: 40 });
      await ix.objects.setStoredSize(o, 30);
      await ix.objects.restoreReference('acme/a', o, 50, 40);
      t.equal((await ix.objects.findShared(o))!.storedSize, 30, 'an existing row is not rewritten');
    });

    await test('group commit: concurrent addReference all visible on resolve; one bad row fails alone', async (t, ix) => {
      const oids = Array.from({ length: 60 }, () => newOid('together'));
      const seen = await Promise.all(
        oids.map(async (o, i) => {
          await ix.objects.addReference(`acme/r${i % 3}`, o, 1000 + i, 500 + i);
          return ix.objects.findInRepo(`acme/r${i % 3}`, o);
        }),
      );
      t.same(
        seen.map((r) => r?.size),
        oids.map((_, i) => 1000 + i),
        'each upload sees its own row as soon as its promise resolves',
      );
      const good = [newOid('good'), newOid('good')];
      const bad = newOid('bad');
      const results = await Promise.allSettled([
        ix.objects.addReference('acme/g', good[0]!, 10, 10),
        ix.objects.addReference('acme/g', bad, {} as never, 10), // a value no database takes as a size
        ix.objects.addReference('acme/g', good[1]!, 20, 20),
      ]);
      t.same(
        results.map((r) => r.status),
        ['fulfilled', 'rejected', 'fulfilled'],
      );
      t.equal((await ix.objects.findInRepo('acme/g', good[0]!))?.size, 10);
      t.equal((await ix.objects.findInRepo('acme/g', good[1]!))?.size, 20);
      t.equal(await ix.objects.findShared(bad), null, 'nothing of the bad row is stored');
    });

    await test('group commit across instances: batches sharing oids, in any order, all commit', async (t, ix, more) => {
      const all = [ix, ...(await more(3))];
      const oids = Array.from({ length: 30 }, () => newOid('shared'));
      // Each instance adds every oid, in its own shuffled order, for two repositories: one shared
      // by all instances (the same rows raced) and one of its own.
      const settled = await Promise.allSettled(
        all.flatMap((inst, i) => {
          const order = [...oids].sort((a, b) => ((a.charCodeAt(i) ^ 7) - (b.charCodeAt(i) ^ 7)) || (a < b ? -1 : 1));
          return order.flatMap((o) => [inst.objects.addReference('org/shared', o, 64, 32), inst.objects.addReference(`org/own${i}`, o, 64, 32)]);
        }),
      );
      t.same(
        settled.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)),
        [],
        'every reference committed',
      );
      t.equal((await ix.maintenance.repoObjects('org/shared')).length, 30);
      for (let i = 0; i < all.length; i++) t.equal((await ix.stats.repoSummary(`org/own${i}`)).objects, 30, `org/own${i}`);
      t.equal((await ix.stats.serverTotals()).objects, 30, 'each object once');
    });

    await test('locks: one per (repo, path), case-sensitive, ids scoped to their repository', async (t, ix) => {
      const first = await ix.locks.create(lock('org/a', 'a.bin'), null);
      t.equal(first.kind, 'created');
      const second = await ix.locks.create(lock('org/a', 'a.bin', 'u2'), null);
      t.equal(second.kind, 'conflict');
      if (second.kind === 'conflict' && first.kind === 'created') t.same(second.existing, first.lock, 'the conflict names the holder');
      t.equal((await ix.locks.create(lock('org/a', 'A.bin'), null)).kind, 'created', 'case differs');
      t.equal((await ix.locks.create(lock('org/b', 'a.bin'), null)).kind, 'created', 'other repository');
      t.equal(await ix.locks.count('org/a'), 2);
      const id = first.kind === 'created' ? first.lock.id : '';
      t.equal(await ix.locks.findById('org/b', id), null, 'not found from another repository');
      t.equal(await ix.locks.delete('org/b', id), false, 'not deletable from another repository');
      t.same(await ix.locks.findById('org/a', id), first.kind === 'created' ? first.lock : null);
      t.equal((await ix.locks.findByPath('org/a', 'a.bin'))?.id, id);
      t.equal(await ix.locks.findByPath('org/a', 'none.bin'), null);
      t.equal(await ix.locks.delete('org/a', id), true);
      t.equal(await ix.locks.delete('org/a', id), false, 'gone');
      t.equal(await ix.locks.findByPath('org/a', 'a.bin'), null);
      const made = await ix.locks.create(lock('org/a', 'ref.bin', 'u3', { ref: null }), null);
      t.equal(made.kind === 'created' ? made.lock.ref : 'x', null, 'a lock without a ref');
      t.match(made, { lock: { ownerId: 'u3', ownerName: 'name-u3', repo: 'org/a', path: 'ref.bin' } });
    });

    await test('locks: a stale lock is replaced in the same transaction; null never goes stale', async (t, ix) => {
      const old = await ix.locks.create(lock('org/a', 'stale.bin', 'u1', { lockedAt: Date.now() - 10_000 }), null);
      t.equal(old.kind, 'created');
      t.equal((await ix.locks.create(lock('org/a', 'stale.bin', 'u2'), Date.now() - 60_000)).kind, 'conflict', 'not stale yet');
      t.equal((await ix.locks.create(lock('org/a', 'stale.bin', 'u2'), null)).kind, 'conflict', 'null: never stale');
      const taken = await ix.locks.create(lock('org/a', 'stale.bin', 'u2'), Date.now() - 5_000);
      t.equal(taken.kind, 'taken_over');
      if (taken.kind === 'taken_over' && old.kind === 'created') {
        t.same(taken.previous, old.lock, 'the replaced lock is reported');
        t.equal(taken.lock.ownerId, 'u2');
        t.ok(taken.lock.seq > old.lock.seq, 'the new lock takes a new position');
      }
      t.equal((await ix.locks.findByPath('org/a', 'stale.bin'))?.ownerId, 'u2');
      t.equal(await ix.locks.count('org/a'), 1);
    });

    await test('locks: paging keys are never reused, so cursors survive deletes', async (t, ix) => {
      const rows = [];
      for (let i = 0; i < 5; i++) {
        const r = await ix.locks.create(lock('org/p', `page/${i}`), null);
        if (r.kind === 'created') rows.push(r.lock);
      }
      await ix.locks.create(lock('org/other', 'x'), null);
      const first = await ix.locks.page('org/p', 0, 2);
      t.same(
        first.map((r) => r.path),
        ['page/0', 'page/1'],
      );
      await ix.locks.delete('org/p', rows[4]!.id);
      const fresh = await ix.locks.create(lock('org/p', 'page/5'), null);
      if (fresh.kind === 'created') t.ok(fresh.lock.seq > rows[4]!.seq, 'seq not reused');
      else t.fail('page/5 created');
      await ix.locks.delete('org/p', rows[2]!.id);
      const rest = await ix.locks.page('org/p', first[1]!.seq, 10);
      t.same(
        rest.map((r) => r.path),
        ['page/3', 'page/5'],
      );
      t.same(await ix.locks.page('org/p', rest[1]!.seq, 10), [], 'past the end');
    });

    await test('locks: of 50 racing creates from several instances exactly one wins', async (t, ix, more) => {
      const all = [ix, ...(await more(4))];
      const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => all[i % all.length]!.locks.create(lock('org/race', 'same.psd', `u${i}`), null)));
      const won = outcomes.filter((o) => o.kind === 'created');
      t.equal(won.length, 1, 'exactly one created');
      t.equal(outcomes.filter((o) => o.kind === 'conflict').length, 49, 'every other one a conflict');
      const winner = won[0]!.kind === 'created' ? won[0]!.lock : null;
      t.ok(
        outcomes.every((o) => o.kind === 'created' || (o.kind === 'conflict' && o.existing.id === winner?.id)),
        'each conflict names the winner',
      );
      t.equal(await ix.locks.count('org/race'), 1);
    });

    await test('locks: of racing takeovers of one stale lock exactly one takes it', async (t, ix, more) => {
      const all = [ix, ...(await more(3))];
      await ix.locks.create(lock('org/race', 'old.psd', 'gone', { lockedAt: Date.now() - 3_600_000 }), null);
      const staleBefore = Date.now() - 60_000;
      const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => all[i % all.length]!.locks.create(lock('org/race', 'old.psd', `u${i}`), staleBefore)));
      t.equal(outcomes.filter((o) => o.kind === 'taken_over').length, 1, 'one takeover');
      t.equal(outcomes.filter((o) => o.kind === 'conflict').length, 19, 'the others meet the new lock');
      t.equal(await ix.locks.count('org/race'), 1);
    });

    await test('sessions: live until expiry, deleted, purged', async (t, ix, more) => {
      const now = Date.now();
      const row = { idHash: 'h'.repeat(64), userId: '7', userName: 'ada', via: 'site_admin', createdAt: now, expiresAt: now + 1000 };
      await ix.sessions.insert(row);
      await ix.sessions.insert({ ...row, idHash: 'old', expiresAt: now - 1 });
      const [other] = await more(1);
      t.same(await other!.sessions.find(row.idHash, now), row, 'another instance (node) finds it');
      t.equal(await ix.sessions.find(row.idHash, now + 1000), null, 'expired at expiresAt');
      t.equal(await ix.sessions.find('unknown', now), null);
      t.equal(await ix.sessions.purgeExpired(now), 1, 'one expired session purged');
      t.equal(await ix.sessions.delete(row.idHash), true);
      t.equal(await ix.sessions.delete(row.idHash), false);
      t.equal(await ix.sessions.find(row.idHash, now), null);
    });

    await test('settings: JSON values per key, replaced, deleted, seen by every instance', async (t, ix, more) => {
      t.equal(await ix.settings.get('access'), null);
      await ix.settings.put('access', { anonymousRead: false, list: ['a', 1, null] }, 'ada', 1000);
      const [other] = await more(1);
      t.same(await other!.settings.get('access'), { value: { anonymousRead: false, list: ['a', 1, null] }, updatedAt: 1000, updatedBy: 'ada' });
      await other!.settings.put('access', 'plain', 'bob', 2000);
      t.same(await ix.settings.get('access'), { value: 'plain', updatedAt: 2000, updatedBy: 'bob' }, 'replaced');
      await ix.settings.delete('access');
      t.equal(await other!.settings.get('access'), null);
      await ix.settings.delete('access'); // deleting what is not there is no error
    });

    await test('settings: putIfAbsent keeps what is there; of racing callers all get the first value', async (t, ix, more) => {
      await ix.settings.put('kept', { a: 1 }, 'ada', 1000);
      t.same(await ix.settings.putIfAbsent('kept', { a: 2 }, 'bob', 2000), { value: { a: 1 }, updatedAt: 1000, updatedBy: 'ada' }, 'an existing value stays');
      t.same(await ix.settings.get('kept'), { value: { a: 1 }, updatedAt: 1000, updatedBy: 'ada' });
      t.same(await ix.settings.putIfAbsent('new', 'x', 'ada', 3000), { value: 'x', updatedAt: 3000, updatedBy: 'ada' }, 'an absent key is saved');
      const all = [ix, ...(await more(3))];
      const got = await Promise.all(Array.from({ length: 16 }, (_, i) => all[i % all.length]!.settings.putIfAbsent('secret', `value-${i}`, `node-${i}`, 4000 + i)));
      t.equal(new Set(got.map((g) => JSON.stringify(g))).size, 1, 'every racing caller got the same row');
      t.same(await ix.settings.get('secret'), got[0], 'and it is the saved one');
    });

    await test('data keys: put, get, page rows not under a key, compare-and-set rewrap, keys in use, delete', async (t, ix, more) => {
      const id = (n: number): string => n.toString(16).padStart(32, '0');
      const wrap = (n: number): Buffer => Buffer.alloc(60, n);
      t.same(await ix.dataKeys.kekIdsInUse(), [], 'no key in use in an empty index');
      t.equal(await ix.dataKeys.getDataKey(id(1)), null);
      for (let n = 1; n <= 5; n++) await ix.dataKeys.putDataKey({ dataKeyId: id(n), kekId: n % 2 === 0 ? 'new' : 'old', wrapped: wrap(n) });
      await t.rejects(ix.dataKeys.putDataKey({ dataKeyId: id(1), kekId: 'new', wrapped: wrap(9) }), 'a dataKeyId is recorded once');
      const [other] = await more(1);
      t.same(await other!.dataKeys.getDataKey(id(3)), { dataKeyId: id(3), kekId: 'old', wrapped: wrap(3) }, 'seen by every instance, bytes intact');
      t.same(await ix.dataKeys.kekIdsInUse(), ['new', 'old']);
      const first = await ix.dataKeys.dataKeysNotWrappedWith('new', null, 2);
      t.same(first.map((r) => r.dataKeyId), [id(1), id(3)], 'ordered by dataKeyId, at most limit');
      const rest = await ix.dataKeys.dataKeysNotWrappedWith('new', id(3), 2);
      t.same(rest.map((r) => r.dataKeyId), [id(5)], 'after is exclusive');
      t.equal(await ix.dataKeys.rewrapDataKey(id(1), 'old', 'new', wrap(11)), true, 'rewrapped while still under fromKekId');
      t.equal(await other!.dataKeys.rewrapDataKey(id(1), 'old', 'new', wrap(12)), false, 'a second rewrap from the old key does nothing');
      t.same(await ix.dataKeys.getDataKey(id(1)), { dataKeyId: id(1), kekId: 'new', wrapped: wrap(11) }, 'the first rewrap stands');
      const racing = [ix, other!, ...(await more(2))];
      const won = await Promise.all(racing.map((i, n) => i.dataKeys.rewrapDataKey(id(3), 'old', 'new', wrap(20 + n))));
      t.equal(won.filter(Boolean).length, 1, 'of racing rewraps exactly one wins');
      t.same((await ix.dataKeys.getDataKey(id(3)))!.wrapped, wrap(20 + won.indexOf(true)), 'and its wrap is the one kept');
      await ix.dataKeys.rewrapDataKey(id(5), 'old', 'new', wrap(15));
      t.same(await ix.dataKeys.dataKeysNotWrappedWith('new', null, 10), [], 'every row under the new key');
      t.same(await ix.dataKeys.kekIdsInUse(), ['new'], 'the old key is no longer in use');
      await ix.dataKeys.deleteDataKey(id(2));
      await ix.dataKeys.deleteDataKey(id(2)); // deleting what is not there is no error
      t.equal(await other!.dataKeys.getDataKey(id(2)), null, 'deleted');
    });

    await test('data keys by age: page rows written before a time, delete only those still old', async (t, ix, more) => {
      const id = (n: number): string => n.toString(16).padStart(32, '0');
      const row = (n: number) => ({ dataKeyId: id(n), kekId: 'k', wrapped: Buffer.alloc(60, n) });
      const t0 = Date.now() - 3_600_000;
      for (let n = 1; n <= 6; n++) await ix.dataKeys.putDataKey(row(n), t0 + n * 1000);
      const stamped = Date.now();
      await ix.dataKeys.putDataKey(row(7));
      t.same(await ix.dataKeys.dataKeyIdsWrittenBefore(t0, null, 10), [], 'none written before the first');
      t.same(await ix.dataKeys.dataKeyIdsWrittenBefore(t0 + 4000, null, 2), [id(1), id(2)], 'written strictly before, ordered by dataKeyId, at most limit');
      t.same(await ix.dataKeys.dataKeyIdsWrittenBefore(t0 + 4000, id(2), 10), [id(3)], 'after is exclusive');
      t.same(await ix.dataKeys.dataKeyIdsWrittenBefore(stamped, null, 10), [1, 2, 3, 4, 5, 6].map(id), 'a row put without a time is stamped now');
      t.same(await ix.dataKeys.dataKeyIdsWrittenBefore(Date.now() + 1, id(6), 10), [id(7)]);
      const [other] = await more(1);
      t.equal(await other!.dataKeys.deleteDataKeysWrittenBefore([id(1), id(5), id(9)], t0 + 4000), 1, 'only rows still old go (an unknown id is no error)');
      t.equal(await ix.dataKeys.deleteDataKeysWrittenBefore([], t0 + 4000), 0, 'an empty list deletes nothing');
      t.equal(await ix.dataKeys.getDataKey(id(1)), null, 'the old row is deleted');
      t.ok((await ix.dataKeys.getDataKey(id(5))) !== null, 'the younger row is kept');
      t.equal(await ix.dataKeys.deleteDataKeysWrittenBefore([2, 3, 4, 6, 7].map(id), Date.now() + 1), 5, 'many in one call');
      t.same(await ix.dataKeys.kekIdsInUse(), ['k'], 'the kept row is still there');
    });

    await test('jobs: insert, progress, finish, recent, recentOf', async (t, ix) => {
      const t0 = Date.now();
      await ix.jobs.insert('j1', 'retain', 'org/a', true, t0 - 30, 'node-a');
      await ix.jobs.insert('j2', 'audit', 'org/b', false, t0 - 20, 'node-b');
      await ix.jobs.insert('j3', 'compress', 'org/a', false, t0 - 10, 'node-a');
      t.match(await ix.jobs.get('j1'), {
        id: 'j1',
        kind: 'retain',
        repo: 'org/a',
        state: 'running',
        dryRun: true,
        objectsDone: 0,
        objectsTotal: null,
        bytesDone: 0,
        bytesTotal: null,
        report: null,
        error: null,
        startedAt: t0 - 30,
        finishedAt: null,
        node: 'node-a',
      });
      await ix.jobs.progress('j1', { objectsDone: 3, objectsTotal: 10, bytesDone: 300, bytesTotal: 5_000_000_000 });
      t.match(await ix.jobs.get('j1'), { objectsDone: 3, objectsTotal: 10, bytesDone: 300, bytesTotal: 5_000_000_000 }, 'sizes past 32 bits come back as numbers');
      await ix.jobs.finish('j1', 'done', { deleted: 2, kept: ['x'] }, null, { objectsDone: 10, objectsTotal: 10, bytesDone: 900, bytesTotal: 900 });
      const done = (await ix.jobs.get('j1'))!;
      t.match(done, { state: 'done', report: { deleted: 2, kept: ['x'] }, error: null, objectsDone: 10, bytesDone: 900 });
      t.ok(done.finishedAt !== null && done.finishedAt >= t0, 'finishedAt set');
      await ix.jobs.finish('j2', 'failed', null, 'disk on fire', { objectsDone: 1, objectsTotal: null, bytesDone: 0, bytesTotal: null });
      t.match(await ix.jobs.get('j2'), { state: 'failed', report: null, error: 'disk on fire' });
      t.same(
        (await ix.jobs.recent(10)).map((j) => j.id),
        ['j3', 'j2', 'j1'],
        'newest first',
      );
      t.same(
        (await ix.jobs.recent(2)).map((j) => j.id),
        ['j3', 'j2'],
      );
      t.same(
        (await ix.jobs.recentOf('org/a', 10)).map((j) => j.id),
        ['j3', 'j1'],
      );
      t.equal(await ix.jobs.get('none'), null);
    });

    await test('jobs: markInterrupted(null) and (liveSince): a live node\'s running job stays', async (t, ix) => {
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      await ix.nodes.heartbeat('live', now, 0, 0);
      await ix.nodes.heartbeat('dead', now - 2 * NODE_STALE_MS, 0, 0);
      await ix.jobs.insert('on-live', 'retain', 'org/a', false, now - 3, 'live');
      await ix.jobs.insert('on-dead', 'retain', 'org/b', false, now - 2, 'dead');
      await ix.jobs.insert('on-unknown', 'retain', 'org/c', false, now - 1, 'never-beat');
      t.equal(await ix.jobs.markInterrupted(liveSince), 2, 'the jobs of dead nodes');
      t.equal((await ix.jobs.get('on-live'))!.state, 'running');
      t.match(await ix.jobs.get('on-dead'), { state: 'interrupted' });
      t.ok((await ix.jobs.get('on-dead'))!.finishedAt !== null, 'an interrupted job has finished');
      t.equal(await ix.jobs.markInterrupted(liveSince), 0, 'nothing more');
      await ix.jobs.finish('on-live', 'done', {}, null, { objectsDone: 0, objectsTotal: 0, bytesDone: 0, bytesTotal: 0 });
      await ix.jobs.insert('again', 'audit', 'org/a', false, now, 'live');
      t.equal(await ix.jobs.markInterrupted(null), 1, 'null: every running job (one node, at start)');
      t.equal((await ix.jobs.get('again'))!.state, 'interrupted');
      t.equal((await ix.jobs.get('on-live'))!.state, 'done', 'finished jobs untouched');
    });

    await test('job lease: exclusive, re-entrant, released, taken over from a dead node', async (t, ix, more) => {
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      await ix.nodes.heartbeat('a', now, 0, 0);
      await ix.nodes.heartbeat('b', now, 0, 0);
      t.equal(await ix.jobs.acquireLease('org/r', 'a', liveSince), true, 'free');
      t.equal(await ix.jobs.acquireLease('org/r', 'b', liveSince), false, 'held by a live node');
      t.equal(await ix.jobs.acquireLease('org/r', 'a', liveSince), true, 'already this node’s');
      t.equal(await ix.jobs.acquireLease('org/s', 'b', liveSince), true, 'another repository is independent');
      await ix.jobs.releaseLease('org/r', 'b');
      t.equal(await ix.jobs.acquireLease('org/r', 'b', liveSince), false, 'only the holder releases');
      await ix.jobs.releaseLease('org/r', 'a');
      t.equal(await ix.jobs.acquireLease('org/r', 'b', liveSince), true, 'released: another node takes it');
      await ix.nodes.heartbeat('b', now - 2 * NODE_STALE_MS, 0, 0);
      t.equal(await ix.jobs.acquireLease('org/r', 'a', liveSince), true, 'its holder stopped beating: taken over');
      t.equal(await ix.jobs.acquireLease('org/r', 'b', liveSince), false, 'and the dead node no longer holds it');
      await ix.jobs.releaseLease('org/r', 'a');
      await ix.jobs.acquireLease('org/r', 'ghost', liveSince);
      t.equal(await ix.jobs.acquireLease('org/r', 'a', liveSince), true, 'a holder with no heartbeat at all is dead');

      const all = [ix, ...(await more(3))];
      const nodes = Array.from({ length: 12 }, (_, i) => `n${i}`);
      for (const n of nodes) await ix.nodes.heartbeat(n, now, 0, 0);
      const got = await Promise.all(nodes.map((n, i) => all[i % all.length]!.jobs.acquireLease('org/race', n, liveSince)));
      t.equal(got.filter(Boolean).length, 1, 'of racing nodes exactly one holds a free lease');
    });

    await test('resumable uploads: announced, held by one live node at a time, advanced by the holder only, listed, removed', async (t, ix, more) => {
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      const oid = createHash('sha256').update('partial').digest('hex') as Oid;
      const other = createHash('sha256').update('other partial').digest('hex') as Oid;
      t.equal(await ix.resumable.get('org/r', oid), null, 'nothing before the batch offers it');
      t.equal(await ix.resumable.claim('org/r', oid, 'a', liveSince, now), false, 'no row: nothing to hold');
      await ix.resumable.announce('org/r', oid, 3_000_000_000, 8 << 20, now - 10);
      await ix.resumable.announce('org/r', oid, 3_000_000_000, 8 << 20, now);
      t.match(await ix.resumable.get('org/r', oid), { repo: 'org/r', oid, size: 3_000_000_000, partSize: 8 << 20, received: 0, holder: null, touchedAt: now }, 'announced again: one row, touched');
      await ix.nodes.heartbeat('a', now, 0, 0);
      await ix.nodes.heartbeat('b', now, 0, 0);
      t.equal(await ix.resumable.claim('org/r', oid, 'a', liveSince, now), true, 'free: taken');
      t.equal(await ix.resumable.claim('org/r', oid, 'b', liveSince, now), false, 'held by a live node');
      t.equal(await ix.resumable.claim('org/r', oid, 'a', liveSince, now), true, 'already this node\'s');
      const states = Uint8Array.from({ length: 80 }, (_, i) => i);
      t.equal(await ix.resumable.advance('org/r', oid, 'b', 16 << 20, states, now), false, 'only the holder advances');
      t.equal(await ix.resumable.advance('org/r', oid, 'a', 16 << 20, states, now + 1), true);
      const row = (await ix.resumable.get('org/r', oid))!;
      t.same([row.received, [...row.states], row.holder], [16 << 20, [...states], 'a'], 'offset and states kept');
      await ix.resumable.release('org/r', oid, 'b');
      t.equal((await ix.resumable.get('org/r', oid))!.holder, 'a', 'only the holder releases');
      await ix.resumable.release('org/r', oid, 'a');
      t.equal(await ix.resumable.claim('org/r', oid, 'b', liveSince, now), true, 'released: another node takes it');
      await ix.nodes.heartbeat('b', now - 2 * NODE_STALE_MS, 0, 0);
      const [second] = await more(1);
      t.equal(await second!.resumable.claim('org/r', oid, 'a', liveSince, now), true, 'its holder stopped beating: taken over (another instance)');

      await ix.resumable.announce('org/s', other, 10, 8 << 20, now - 5000);
      t.same((await ix.resumable.list('org/r', null, liveSince)).map((r) => r.oid), [oid], 'one repository\'s rows');
      t.same((await ix.resumable.list(null, now - 1000, liveSince)).map((r) => r.oid), [other], 'idle and held by no live node');
      await ix.resumable.release('org/r', oid, 'a');
      t.same((await ix.resumable.list(null, now + 10, liveSince)).map((r) => r.oid).sort(), [oid, other].sort(), 'released: idle too');
      t.same(await ix.resumable.figures(), { count: 2, bytes: 16 << 20 }, 'figures');
      await ix.resumable.remove('org/r', oid);
      t.equal(await ix.resumable.get('org/r', oid), null, 'removed');

      const all = [ix, ...(await more(3))];
      await ix.resumable.announce('org/race', oid, 10, 8 << 20, now);
      const nodes = Array.from({ length: 12 }, (_, i) => `n${i}`);
      for (const n of nodes) await ix.nodes.heartbeat(n, now, 0, 0);
      const got = await Promise.all(nodes.map((n, i) => all[i % all.length]!.resumable.claim('org/race', oid, n, liveSince, now)));
      t.equal(got.filter(Boolean).length, 1, 'of racing nodes exactly one holds it');
    });

    await test('maintenance: references, drop outcomes, intents, uploads in flight', async (t, ix) => {
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      const [x, y] = [newOid('m'), newOid('m')].sort() as [Oid, Oid];
      await ix.objects.addReference('org/one', y, 20, 15);
      await ix.objects.addReference('org/one', x, 10, 10);
      await ix.objects.addReference('org/two', x, 10, 10);
      const listed = await ix.maintenance.repoObjects('org/one');
      t.same(
        listed.map((r) => [r.oid, r.size, r.storedSize, r.quarantined]),
        [
          [x, 10, 10, false],
          [y, 20, 15, false],
        ],
        'by oid, with sizes and marks',
      );
      t.ok(listed.every((r) => r.referencedAt >= now && r.createdAt >= now), 'timestamps in ms');
      t.equal(await ix.maintenance.referencedElsewhere(x, 'org/one'), true);
      t.equal(await ix.maintenance.referencedElsewhere(y, 'org/one'), false);
      t.ok(await ix.objects.findShared(y));
      t.equal(await ix.maintenance.dropReference('org/one', x, liveSince, 'node-m'), 'kept', 'another repository still references it');
      t.ok(await ix.objects.findShared(x));
      t.equal(await ix.maintenance.dropReference('org/two', x, liveSince, 'node-m'), 'delete', 'the last reference: the bytes must go');
      t.equal(await ix.objects.findShared(x), null, 'the object row went');
      // The intent names its node: left over only once that node is dead (or unknown).
      t.same(await ix.maintenance.pendingDeletes(liveSince), [x], 'node-m never beat: its intent is left over');
      await ix.nodes.heartbeat('node-m', now, 0, 0);
      t.same(await ix.maintenance.pendingDeletes(liveSince), [], 'node-m is live: it may still be deleting');
      await ix.nodes.heartbeat('node-m', now - 2 * NODE_STALE_MS, 0, 0);
      t.same(await ix.maintenance.pendingDeletes(liveSince), [x], 'node-m died: left over');
      t.equal(await ix.maintenance.deletePending(x), true);
      const up = await ix.maintenance.beginUpload(x, 'node-a', now);
      t.equal(up.deletePending, true, 'an upload of an oid being deleted is told to wait');
      t.equal(up.quarantined, false);
      await ix.maintenance.endUpload(up.ticket);
      await ix.maintenance.deleted(x);
      t.same(await ix.maintenance.pendingDeletes(liveSince), []);
      t.equal(await ix.maintenance.deletePending(x), false);

      // A write in flight on a live node keeps the bytes; one on a dead node does not.
      await ix.nodes.heartbeat('node-a', now, 0, 0);
      await ix.nodes.heartbeat('node-dead', now - 2 * NODE_STALE_MS, 0, 0);
      await ix.maintenance.quarantine(y, 'org/one', 'r'.repeat(600));
      const live = await ix.maintenance.beginUpload(y, 'node-a', now);
      t.equal(live.deletePending, false);
      t.equal(live.quarantined, true, 'the upload learns the oid is quarantined in the same call');
      t.equal(await ix.maintenance.dropReference('org/one', y, liveSince, 'node-m'), 'in_flight', 'a live node is writing it');
      t.equal(await ix.objects.findShared(y), null, 'the row went anyway');
      t.equal(await ix.objects.isQuarantined(y), false, 'and its quarantine mark');
      t.same(await ix.maintenance.pendingDeletes(liveSince), [], 'no deletion intent');
      t.equal(await ix.maintenance.deletePending(y), false);
      await ix.maintenance.endUpload(live.ticket);
      const z = newOid('m');
      await ix.objects.addReference('org/one', z, 1, 1);
      const dead = await ix.maintenance.beginUpload(z, 'node-dead', now);
      const ghost = await ix.maintenance.beginUpload(z, 'never-beat', now);
      t.not(dead.ticket, ghost.ticket, 'tickets are distinct');
      t.equal(await ix.maintenance.dropReference('org/one', z, liveSince, 'node-m'), 'delete', 'writes of dead nodes hold nothing');
      await ix.maintenance.endUpload(live.ticket); // ending twice is no error
    });

    await test('handshake: racing upload and delete of one oid from two instances never both proceed', async (t, ix, more) => {
      const [other] = await more(1);
      const now = Date.now();
      await ix.nodes.heartbeat('up', now, 0, 0);
      const liveSince = now - NODE_STALE_MS;
      let deletes = 0;
      let inFlight = 0;
      let violations = 0;
      for (let round = 0; round < 40; round++) {
        const batch = Array.from({ length: 5 }, () => newOid('race'));
        for (const o of batch) await ix.objects.addReference('org/h', o, 1, 1);
        await Promise.all(
          batch.map(async (o, i) => {
            const [drop, up] = await Promise.all(
              i % 2 === 0
                ? [ix.maintenance.dropReference('org/h', o, liveSince, 'del-a'), other!.maintenance.beginUpload(o, 'up', now)]
                : [other!.maintenance.dropReference('org/h', o, liveSince, 'del-b'), ix.maintenance.beginUpload(o, 'up', now)],
            );
            if (drop === 'delete') deletes++;
            if (drop === 'in_flight') inFlight++;
            // The one outcome that loses data: the bytes are deleted while an upload writes them unaware.
            if (drop === 'delete' && !up.deletePending) violations++;
            if (drop === 'in_flight' && up.deletePending) violations++;
          }),
        );
      }
      t.equal(violations, 0, `never both unaware (${deletes} deletes first, ${inFlight} uploads first)`);
      t.equal(deletes + inFlight, 200, 'every drop was the last reference');
    });

    await test('upload commit: the reference ends its in-flight row; an unverified copy of a quarantined oid is refused, a verified one heals', async (t, ix) => {
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      await ix.nodes.heartbeat('node-u', now, 0, liveSince);
      const [a, b, q] = [newOid('c'), newOid('c'), newOid('c')];
      await ix.objects.addReference('org/old', a, 5, 5);
      await ix.objects.addReference('org/old', q, 7, 7);
      const ua = await ix.maintenance.beginUpload(a, 'node-u', now);
      const ub = await ix.maintenance.beginUpload(b, 'node-u', now);
      await ix.maintenance.quarantine(q, 'org/old', 'corrupt');
      const uq = await ix.maintenance.beginUpload(q, 'node-u', now);
      // Finishing together: one group commit holding a refused row beside good ones.
      const outcomes = await Promise.allSettled([
        ix.objects.addReference('org/new', a, 5, 5, { storedVerified: false, ticket: ua.ticket, ackedSweep: 0, setting: null }),
        ix.objects.addReference('org/new', b, 6, 4, { storedVerified: true, ticket: ub.ticket, ackedSweep: 0, setting: null }),
        ix.objects.addReference('org/new', q, 7, 7, { storedVerified: false, ticket: uq.ticket, ackedSweep: 0, setting: null }),
      ]);
      t.same(outcomes.map((o) => o.status), ['fulfilled', 'fulfilled', 'rejected'], 'only the quarantined oid with an unverified copy is refused');
      t.ok(outcomes[2]!.status === 'rejected' && outcomes[2].reason instanceof QuarantinedCopy, 'as QuarantinedCopy');
      t.ok(await ix.objects.findInRepo('org/new', a));
      t.same(await ix.objects.findInRepo('org/new', b), { oid: b, size: 6, storedSize: 4 });
      t.equal(await ix.objects.findInRepo('org/new', q), null, 'no reference to the bad copy');
      t.equal(await ix.objects.isQuarantined(q), true, 'and the mark stays');
      // The committed uploads' rows went with their references; the refused one's is still there.
      t.equal(await ix.maintenance.dropReference('org/old', a, liveSince, 'del'), 'kept');
      t.equal(await ix.maintenance.dropReference('org/new', a, liveSince, 'del'), 'delete', 'a\'s upload no longer in flight');
      await ix.maintenance.deleted(a);
      t.equal(await ix.maintenance.dropReference('org/new', b, liveSince, 'del'), 'delete', 'nor b\'s');
      await ix.maintenance.deleted(b);
      t.equal(await ix.maintenance.dropReference('org/old', q, liveSince, 'del'), 'in_flight', 'the refused upload is still in flight');
      await ix.maintenance.endUpload(uq.ticket);
      await ix.maintenance.quarantine(q, 'org/old', 'corrupt');
      await ix.objects.addReference('org/old', q, 7, 6, { storedVerified: true, ticket: null, ackedSweep: 0, setting: null });
      t.equal(await ix.objects.isQuarantined(q), false, 'fresh verified bytes heal it');
      t.same(await ix.objects.findInRepo('org/old', q), { oid: q, size: 7, storedSize: 6 });
    });

    await test('sweeps: deleting only once every live node acknowledged; references of a node that missed one are refused', async (t, ix, more) => {
      const [other] = await more(1);
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      t.same(await ix.nodes.heartbeat('a', now, 0, liveSince), { latest: 0, open: false }, 'no sweep yet');
      await ix.nodes.heartbeat('b', now, 0, liveSince);
      await ix.nodes.heartbeat('dead', now - 2 * NODE_STALE_MS, 0, liveSince);
      const s1 = await ix.nodes.openSweep('a', now);
      t.ok(s1 > 0);
      t.same(await other!.nodes.heartbeat('b', now, 0, liveSince), { latest: s1, open: true }, 'every instance sees it open');
      t.same(await ix.nodes.startDeleting(s1, liveSince), ['a', 'b'], 'live nodes behind, the dead one not counted');
      await ix.nodes.heartbeat('a', now, s1, liveSince);
      t.same(await other!.nodes.startDeleting(s1, liveSince), ['b']);
      // b has not acknowledged yet: its references still go in (nothing is deleted yet).
      const x = newOid('sw');
      await other!.objects.addReference('org/s', x, 1, 1, { storedVerified: true, ticket: null, ackedSweep: 0, setting: null });
      t.ok(await ix.objects.findInRepo('org/s', x), 'a sweep not yet deleting refuses nothing');
      await other!.nodes.heartbeat('b', now, s1, liveSince);
      t.same(await ix.nodes.startDeleting(s1, liveSince), [], 'all acknowledged: deleting');
      const y = newOid('sw');
      await t.rejects(ix.objects.addReference('org/s', y, 1, 1, { storedVerified: true, ticket: null, ackedSweep: 0, setting: null }), SweepMissed, 'a node that missed a deleting sweep is refused');
      t.equal(await ix.objects.findInRepo('org/s', y), null);
      await ix.objects.addReference('org/s', y, 1, 1, { storedVerified: true, ticket: null, ackedSweep: s1, setting: null });
      t.ok(await ix.objects.findInRepo('org/s', y), 'once acknowledged it is accepted');
      await ix.objects.addReference('org/s', newOid('sw'), 1, 1);
      t.pass('a reference without an upload commit is never refused by sweeps');
      await ix.nodes.closeSweep(s1, now);
      t.same(await ix.nodes.heartbeat('a', now, s1, liveSince), { latest: s1, open: false }, 'closed');
      await t.rejects(other!.objects.addReference('org/s', newOid('sw'), 1, 1, { storedVerified: true, ticket: null, ackedSweep: 0, setting: null }), SweepMissed, 'closed, its deletes still count against whoever missed it');
      const s2 = await other!.nodes.openSweep('dead', now);
      t.ok(s2 > s1, 'numbers only grow');
      t.same(await ix.nodes.heartbeat('a', now, s1, liveSince), { latest: s2, open: false }, 'a sweep of a dead node is not open');
    });

    await test('upload commit: refused when the setting it was judged by is no longer saved so', async (t, ix, more) => {
      const [other] = await more(1);
      const commit = (value: string | null) => ({ storedVerified: true, ticket: null, ackedSweep: 0, setting: { key: 'access', value } });
      const [a, b, c, d] = [newOid('g'), newOid('g'), newOid('g'), newOid('g')];
      await ix.objects.addReference('org/g', a, 1, 1, commit(null));
      t.ok(await ix.objects.findInRepo('org/g', a), 'nothing saved, judged by nothing saved: accepted');
      await other!.settings.put('access', { repo_quota: 10 }, 'admin', Date.now());
      await t.rejects(ix.objects.addReference('org/g', b, 1, 1, commit(null)), SettingsChanged, 'saved since on another instance: refused');
      t.equal(await ix.objects.findShared(b), null, 'and nothing recorded');
      await ix.objects.addReference('org/g', b, 1, 1, commit(JSON.stringify({ repo_quota: 10 })));
      t.ok(await ix.objects.findInRepo('org/g', b), 'judged by the text as saved: accepted');
      await t.rejects(ix.objects.addReference('org/g', c, 1, 1, commit(JSON.stringify({ repo_quota: 11 }))), SettingsChanged, 'another text: refused');
      await other!.settings.delete('access');
      await t.rejects(ix.objects.addReference('org/g', c, 1, 1, commit(JSON.stringify({ repo_quota: 10 }))), SettingsChanged, 'deleted since: refused');
      const together = await Promise.allSettled([ix.objects.addReference('org/g', c, 1, 1, commit(null)), ix.objects.addReference('org/g', d, 1, 1, commit('{"stale":true}'))]);
      t.same(together.map((o) => o.status), ['fulfilled', 'rejected'], 'in one group commit each row is held to its own guard');
    });

    await test('nodes: forget those silent since a moment, with the uploads they left in flight', async (t, ix) => {
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      await ix.nodes.heartbeat('old', now - 10 * NODE_STALE_MS, 0, liveSince);
      await ix.nodes.heartbeat('new', now, 0, liveSince);
      const o = newOid('f');
      await ix.objects.addReference('org/f', o, 1, 1);
      const left = await ix.maintenance.beginUpload(o, 'old', now);
      const live = await ix.maintenance.beginUpload(o, 'new', now);
      t.equal(await ix.nodes.forget(now - 5 * NODE_STALE_MS), 1, 'one node forgotten');
      t.equal(await ix.nodes.forget(now - 5 * NODE_STALE_MS), 0, 'and only once');
      t.equal(await ix.maintenance.dropReference('org/f', o, liveSince, 'del'), 'in_flight', 'the live node\'s upload still counts');
      await ix.maintenance.endUpload(live.ticket);
      await ix.maintenance.endUpload(left.ticket); // already gone: no error
      t.equal(await ix.maintenance.settleIntent(o, liveSince), 'delete', 'nothing left in flight');
    });

    await test('settleIntent: stored again, being written on a live node, or to delete', async (t, ix) => {
      const now = Date.now();
      const liveSince = now - NODE_STALE_MS;
      await ix.nodes.heartbeat('w', now, 0, liveSince);
      const [x, y, z] = [newOid('i'), newOid('i'), newOid('i')];
      for (const o of [x, y, z]) {
        await ix.objects.addReference('org/i', o, 1, 1);
        t.equal(await ix.maintenance.dropReference('org/i', o, liveSince, 'gone-node'), 'delete');
      }
      t.same((await ix.maintenance.pendingDeletes(liveSince)).sort(), [x, y, z].sort(), 'three intents left over');
      await ix.objects.addReference('org/j', x, 1, 1);
      t.equal(await ix.maintenance.settleIntent(x, liveSince), 'stored', 'recorded again since');
      t.equal(await ix.maintenance.deletePending(x), false, 'its intent dropped');
      const up = await ix.maintenance.beginUpload(y, 'w', now);
      t.equal(await ix.maintenance.settleIntent(y, liveSince), 'in_flight');
      t.equal(await ix.maintenance.deletePending(y), true, 'left for a later run');
      await ix.maintenance.endUpload(up.ticket);
      t.equal(await ix.maintenance.settleIntent(y, liveSince), 'delete');
      t.equal(await ix.maintenance.settleIntent(z, liveSince), 'delete');
    });

    await test('stats: per-repository figures, histogram, locks, audits, lists, totals', async (t, ix) => {
      const big = newOid('s');
      const small = newOid('s');
      await ix.objects.addReference('org/a', big, 5 * 1024 ** 3, 4 * 1024 ** 3);
      await ix.objects.addReference('org/a', small, 100, 80);
      await ix.objects.addReference('org/b', small, 100, 80);
      t.same(await ix.stats.repoSummary('org/a'), { objects: 2, logicalBytes: 5 * 1024 ** 3 + 100, storedBytes: 4 * 1024 ** 3 + 80 });
      t.same(await ix.stats.repoSummary('org/none'), { objects: 0, logicalBytes: 0, storedBytes: 0 });
      const largest = await ix.stats.largestObjects('org/a', 1);
      t.match(largest, [{ oid: big, size: 5 * 1024 ** 3, storedSize: 4 * 1024 ** 3 }]);
      const hist = await ix.stats.sizeHistogram('org/a');
      t.equal(hist.length, HISTOGRAM_BOUNDS.length + 1, 'every bucket, empty ones included');
      t.same(hist[0], { min: 0, max: 1024, count: 1, bytes: 100 });
      t.same(hist[hist.length - 1], { min: HISTOGRAM_BOUNDS[HISTOGRAM_BOUNDS.length - 1], max: null, count: 1, bytes: 5 * 1024 ** 3 });
      t.equal(
        hist.reduce((n, b) => n + b.count, 0),
        2,
      );

      const at = Date.now();
      await ix.locks.create(lock('org/a', 'z.bin', 'u1', { lockedAt: at - 2 }), null);
      await ix.locks.create(lock('org/a', 'y.bin', 'u2', { lockedAt: at - 1 }), null);
      await ix.locks.create(lock('org/b', 'x.bin'), null);
      const locks = await ix.stats.locks('org/a', 1);
      t.equal(locks.total, 2, 'the total beyond the limit');
      t.match(locks.items, [{ path: 'z.bin', ownerName: 'name-u1', lockedAt: at - 2 }], 'oldest first');
      t.same(await ix.stats.locks('org/none', 5), { total: 0, items: [] });
      t.equal(await ix.stats.lockTotal(), 3);

      t.equal(await ix.stats.lastAudit('org/a'), null);
      t.same(await ix.stats.auditTotals(), { clean: 0, problemsFound: 0, incomplete: 0, lastSuccessAt: null });
      await ix.stats.recordAudit('org/a', { finishedAt: 1000, objects: 2, bytes: 5, corrupt: 0, unreadable: 0, complete: true });
      await ix.stats.recordAudit('org/a', { finishedAt: 2000, objects: 2, bytes: 5, corrupt: 0, unreadable: 0, complete: true });
      await ix.stats.recordAudit('org/b', { finishedAt: 1500, objects: 1, bytes: 5, corrupt: 1, unreadable: 0, complete: true });
      await ix.stats.recordAudit('org/c', { finishedAt: 1700, objects: 0, bytes: 0, corrupt: 0, unreadable: 0, complete: false });
      t.same(await ix.stats.lastAudit('org/a'), { finishedAt: 2000, objects: 2, bytes: 5, corrupt: 0, unreadable: 0, complete: true }, 'replaced');
      t.same(await ix.stats.auditTotals(), { clean: 1, problemsFound: 1, incomplete: 1, lastSuccessAt: 2000 });

      t.same(await ix.stats.repositoryList(10), [
        { repo: 'org/a', objects: 2, logicalBytes: 5 * 1024 ** 3 + 100, audit: { finishedAt: 2000, ok: true } },
        { repo: 'org/b', objects: 1, logicalBytes: 100, audit: { finishedAt: 1500, ok: false } },
      ]);
      t.same(
        (await ix.stats.repositoryList(1)).map((r) => r.repo),
        ['org/a'],
      );
      t.same(await ix.stats.serverTotals(), {
        repositories: 2,
        objects: 2,
        references: 3,
        logicalBytes: 5 * 1024 ** 3 + 200,
        uniqueBytes: 5 * 1024 ** 3 + 100,
        storedBytes: 4 * 1024 ** 3 + 80,
      });
    });

    await test('stats samples: totals replace, deltas and rejections add up across instances', async (t, ix, more) => {
      const [other] = await more(1);
      t.equal(await ix.stats.lastSample(), null);
      await ix.stats.insertSample(sample(1000));
      await ix.stats.insertSample(sample(2000, { uploads: 3, uploadBytes: 30, downloads: 1, downloadBytes: 7, rejections: { quota: 1 } }));
      await other!.stats.insertSample(sample(2000, { objects: 9, uploads: 4, uploadBytes: 40, downloads: 0, downloadBytes: 0, rejections: { quota: 2, auth: 5 } }));
      await ix.stats.insertSample(sample(3000));
      const merged = (await ix.stats.samplesSince(1000))[0]!;
      t.same(merged, {
        ...sample(2000),
        objects: 9,
        uploads: 7,
        uploadBytes: 70,
        downloads: 1,
        downloadBytes: 7,
        rejections: { quota: 3, auth: 5 },
      });
      t.same(
        (await ix.stats.samplesSince(0)).map((s) => s.at),
        [1000, 2000, 3000],
        'oldest first, after `at`',
      );
      t.same(await ix.stats.lastSample(), sample(3000));
      await ix.stats.pruneSamples(2000);
      t.same(
        (await ix.stats.samplesSince(0)).map((s) => s.at),
        [2000, 3000],
        'pruned before 2000',
      );
    });

    await test('ping, checkpoint; two instances opening a fresh database at once migrate it once', async (t, ix, more, target) => {
      await ix.ping();
      await ix.checkpoint();
      t.ok(ix.kind === 'sqlite' || ix.kind === 'postgres');
      const fresh = await make();
      const logs: { msg: string; fields: object }[] = [];
      const log = (msg: string, fields: object): void => void logs.push({ msg, fields });
      const both = await Promise.all([fresh.open(log), fresh.open(log), fresh.open(log)]);
      try {
        const steps = logs.filter((l) => l.msg === 'index migrated').map((l) => JSON.stringify(l.fields));
        t.equal(new Set(steps).size, steps.length, `no migration step ran twice (${steps.length} logged)`);
        await Promise.all(both.map((i) => i.ping()));
        await both[0]!.objects.addReference('org/a', newOid(), 1, 1);
        t.equal(await both[1]!.objects.hasAny(), true, 'one schema, shared');
      } finally {
        for (const i of both) await i.close();
        await fresh.remove();
      }
      void target;
    });
  });
}

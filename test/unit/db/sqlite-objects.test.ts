import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { openSqliteIndex } from '../../../src/db/sqlite/sqlite-index.js';
import { parseOid, type Oid } from '../../../src/protocol/oid.js';
import { tmpDir } from '../../helpers/start-server.js';

// References of uploads acknowledged together share one transaction, on a real SQLite file.
const dir = tmpDir('stowage-objects-repo-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const db = openSqliteIndex(join(dir, 'index.sqlite'));
t.teardown(() => db.close());
const objects = db.objects;
const oid = (s: string): Oid => parseOid(createHash('sha256').update(s).digest('hex'))!;

t.test('references added together are all in when each promise resolves', async (t) => {
  const oids = Array.from({ length: 8 }, (_, i) => oid(`together-${i}`));
  const seen = await Promise.all(
    oids.map(async (o, i) => {
      await objects.addReference('acme/game', o, 1000 + i, 1000 + i);
      return objects.findInRepo('acme/game', o);
    }),
  );
  t.same(
    seen.map((r) => r?.size),
    oids.map((_, i) => 1000 + i),
    'each upload sees its own row as soon as it resumes',
  );
  t.equal(await objects.findInRepo('other/repo', oids[0]!), null, 'still scoped to its repository');
});

t.test('one bad row fails alone; the others of its transaction are kept', async (t) => {
  const good = [oid('good-1'), oid('good-2')];
  const results = await Promise.allSettled([
    objects.addReference('acme/game', good[0]!, 10, 10),
    objects.addReference('acme/game', oid('bad'), {} as never, 10), // a value SQLite cannot bind
    objects.addReference('acme/game', good[1]!, 20, 20),
  ]);
  t.same(
    results.map((r) => r.status),
    ['fulfilled', 'rejected', 'fulfilled'],
  );
  t.equal((await objects.findInRepo('acme/game', good[0]!))?.size, 10);
  t.equal((await objects.findInRepo('acme/game', good[1]!))?.size, 20);
  t.equal(await objects.findShared(oid('bad')), null, 'nothing of the bad row is stored');
});

t.test('a batch lookup answers for this repository only and leaves quarantined objects out', async (t) => {
  const [held, other, bad, absent] = ['many-held', 'many-other', 'many-bad', 'many-absent'].map(oid) as [Oid, Oid, Oid, Oid];
  await objects.addReference('acme/many', held, 10, 9);
  await objects.addReference('other/repo', other, 20, 20);
  await objects.addReference('acme/many', bad, 30, 30);
  await db.maintenance.quarantine(bad, 'acme/many', 'audit: digest mismatch');
  const found = await objects.findManyInRepo('acme/many', [held, other, bad, absent]);
  t.same([...found.keys()], [held], 'only the object this repository holds, unquarantined');
  t.same(found.get(held), { oid: held, size: 10, storedSize: 9 }, 'with its sizes');
  t.equal((await objects.findManyInRepo('acme/many', [])).size, 0, 'an empty question, an empty answer');
  // Reads and writes interleave on the one connection: the lookup's transaction must be over.
  await objects.addReference('acme/many', absent, 40, 40);
  t.same([...(await objects.findManyInRepo('acme/many', [absent, held])).keys()], [absent, held], 'a reference added after it is seen');
});

t.test('a quarantine mark is seen by an index opened afterwards on the same file', async (t) => {
  const file = join(dir, 'reopened.sqlite');
  const first = openSqliteIndex(file);
  const o = parseOid('c'.repeat(64))!;
  await first.objects.addReference('acme/r', o, 10, 10);
  await first.maintenance.quarantine(o, 'acme/r', 'corrupt');
  await first.close();
  const second = openSqliteIndex(file);
  t.teardown(() => second.close());
  t.equal(await second.objects.isQuarantined(o), true, 'marked before this index was opened');
  t.equal(await second.objects.isQuarantined(parseOid('d'.repeat(64))!), false, 'another oid is not');
});

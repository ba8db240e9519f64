import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { openSqliteIndex } from '../../../src/db/sqlite/sqlite-index.js';
import { parseBatchRequest } from '../../../src/protocol/batch.js';
import { parseOid, type Oid } from '../../../src/protocol/oid.js';
import { parseRepoName } from '../../../src/protocol/repo-name.js';
import { BatchService } from '../../../src/service/batch-service.js';
import { DownloadGrants } from '../../../src/service/download-grants.js';
import { tmpDir } from '../../helpers/start-server.js';

// The downloads a batch answer grants, whose GETs then skip their own index lookup
// (service/download-grants.ts). A clock of the test's own: nothing here waits.

const oid = (): Oid => parseOid(createHash('sha256').update(randomBytes(16)).digest('hex'))!;

t.test('a grant names one repository and one oid, serves one GET, and lapses', async (t) => {
  let now = 1000;
  const grants = new DownloadGrants({ ttlMs: 50, now: () => now });
  const a = oid();
  const b = oid();
  grants.grant('acme/game', a);
  t.equal(grants.size, 1);
  t.notOk(grants.take('acme/other', a), 'another repository has no grant for it');
  t.notOk(grants.take('acme/game', b), 'nor has this one for another oid');
  t.ok(grants.take('acme/game', a), 'the granted download');
  t.notOk(grants.take('acme/game', a), 'used up: a second GET asks the index');
  t.equal(grants.size, 0);

  grants.grant('acme/game', a);
  now += 50;
  t.notOk(grants.take('acme/game', a), 'lapsed after its time');
  t.equal(grants.size, 0, 'and gone once asked for');

  grants.grant('acme/game', a);
  now += 40;
  grants.grant('acme/game', a);
  now += 40;
  t.ok(grants.take('acme/game', a), 'granted again: its time starts again');
});

t.test('withdrawing an oid takes its grants for every repository; others stay', async (t) => {
  const grants = new DownloadGrants();
  const a = oid();
  const b = oid();
  grants.grant('acme/game', a);
  grants.grant('acme/other', a);
  grants.grant('acme/game', b);
  t.equal(grants.size, 3);
  grants.withdraw(a);
  t.equal(grants.size, 1);
  t.notOk(grants.take('acme/game', a));
  t.notOk(grants.take('acme/other', a));
  t.ok(grants.take('acme/game', b), 'another oid keeps its grant');
  grants.withdraw(a);
  t.equal(grants.size, 0, 'withdrawing what is not held changes nothing');
});

t.test('held grants are bounded: the oldest go first', async (t) => {
  const grants = new DownloadGrants({ max: 3 });
  const oids = [oid(), oid(), oid(), oid()];
  for (const o of oids.slice(0, 3)) grants.grant('acme/game', o);
  grants.grant('acme/game', oids[0]!); // granted again: now the newest
  grants.grant('acme/game', oids[3]!);
  t.equal(grants.size, 3);
  t.notOk(grants.take('acme/game', oids[1]!), 'the oldest grant was pushed out');
  for (const o of [oids[0]!, oids[2]!, oids[3]!]) t.ok(grants.take('acme/game', o));
  const shared = oid();
  grants.grant('acme/a', shared);
  grants.grant('acme/b', shared);
  grants.grant('acme/c', shared);
  grants.grant('acme/d', oid());
  t.equal(grants.size, 1, "pushing out an oid takes all its repositories' grants");
});

t.test('a batch grants the downloads it links to this server, nothing else', async (t) => {
  const db = openSqliteIndex(join(tmpDir(), 'index.sqlite'));
  t.teardown(() => db.close());
  const repo = parseRepoName('acme', 'game')!;
  const held = oid();
  const missing = oid();
  await db.objects.addReference(repo.key, held, 10, 10);
  const grants = new DownloadGrants();
  const batch = new BatchService(db.objects, { baseUrl: 'http://lfs.test', chunkedUploadThreshold: 1e9 }, { grants });
  const answer = await batch.answer(repo, parseBatchRequest({ operation: 'download', objects: [{ oid: held, size: 10 }, { oid: missing, size: 5 }, { oid: oid(), size: 7 }] }));
  t.ok(answer.objects[0]!.actions?.download, 'the held object gets its link');
  t.equal(grants.size, 1, 'one grant: for the object the answer links to');
  t.ok(grants.take(repo.key, held));
  await batch.answer(repo, parseBatchRequest({ operation: 'upload', objects: [{ oid: held, size: 10 }, { oid: missing, size: 5 }] }));
  t.equal(grants.size, 0, 'an upload batch grants no download');
  await batch.answer(repo, parseBatchRequest({ operation: 'download', objects: [{ oid: held, size: 11 }] }));
  t.equal(grants.size, 0, 'nor does a download refused for its size');
});

t.test('has tells of a live grant without using it up', async (t) => {
  let now = 1000;
  const grants = new DownloadGrants({ ttlMs: 50, now: () => now });
  const a = oid();
  t.notOk(grants.has('acme/game', a), 'nothing granted');
  grants.grant('acme/game', a);
  t.ok(grants.has('acme/game', a), 'granted');
  t.ok(grants.has('acme/game', a), 'still granted: has uses nothing up');
  t.notOk(grants.has('acme/other', a), 'not for another repository');
  now += 50;
  t.notOk(grants.has('acme/game', a), 'lapsed');
  t.equal(grants.size, 1, 'a lapsed grant goes when taken, withdrawn or pushed out, not when asked about');
});

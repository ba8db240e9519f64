import { randomBytes, createHash } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { openSqliteIndex } from '../../../src/db/sqlite/sqlite-index.js';
import { parseBatchRequest } from '../../../src/protocol/batch.js';
import { parseOid } from '../../../src/protocol/oid.js';
import { parseRepoName } from '../../../src/protocol/repo-name.js';
import { BatchService } from '../../../src/service/batch-service.js';
import { OFF_LOOP_MIN_SIZE, warmHasherFor } from '../../../src/store/layers/verify.js';
import { HashThread } from '../../../src/workers/hash-thread.js';
import { tmpDir } from '../../helpers/start-server.js';

// A batch that sends uploads to this server tells the store their sizes before the PUTs come, so the
// hash thread is starting while the client reads the answer (native-bench/NOTES.md, "A hash thread
// that is not up yet"). Real SQLite index, real hash thread.

const oid = (): string => createHash('sha256').update(randomBytes(16)).digest('hex');

t.test('the sizes of the uploads a batch sends here are announced; present objects and downloads are not', async (t) => {
  const db = openSqliteIndex(join(tmpDir(), 'index.sqlite'));
  t.teardown(() => db.close());
  const repo = parseRepoName('acme', 'game')!;
  const held = oid();
  await db.objects.addReference(repo.key, parseOid(held)!, 10, 10);
  const announced: number[] = [];
  const batch = new BatchService(db.objects, { baseUrl: 'http://lfs.test', chunkedUploadThreshold: 1e9 }, { uploadAhead: (size) => announced.push(size) });
  const big = oid();
  await batch.answer(repo, parseBatchRequest({ operation: 'upload', objects: [{ oid: big, size: 16 << 20 }, { oid: held, size: 10 }, { oid: oid(), size: 100 }] }));
  t.same(announced, [16 << 20, 100], 'each object the client is asked to upload, none it already stored');
  await batch.answer(repo, parseBatchRequest({ operation: 'download', objects: [{ oid: held, size: 10 }] }));
  t.same(announced, [16 << 20, 100], 'a download announces nothing');
});

t.test('an announced upload the hash thread will hash starts it; a small one does not', async (t) => {
  const thread = new HashThread();
  t.teardown(() => thread.close());
  warmHasherFor(thread, OFF_LOOP_MIN_SIZE - 1);
  t.notOk(thread.running, 'hashed in line: no thread for it');
  warmHasherFor(thread, OFF_LOOP_MIN_SIZE);
  t.ok(thread.running, 'started ahead of the PUT');
  await thread.warm();
  t.ok(thread.ready, 'and up');
});

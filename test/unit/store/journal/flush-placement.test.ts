import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { parseOid, type Oid } from '../../../../src/protocol/oid.js';
import { DiskBlobStore } from '../../../../src/store/disk.js';
import { JournalingBlobStore } from '../../../../src/store/journal/journaling-store.js';
import { tmpDir } from '../../../helpers/start-server.js';

// The journal layer tells the journal what is in flight (store/journal.ts, #flush): small uploads are
// flushed in line only while no upload writes a file of its own, whose data a flush of the device's
// cache would wait for. So with a large upload in flight, the small ones' flushes go to the threadpool.

const oidOf = (d: Buffer): Oid => parseOid(createHash('sha256').update(d).digest('hex'))!;

async function put(store: JournalingBlobStore, data: Buffer): Promise<void> {
  const w = await store.journal.createWriter('acme/game', oidOf(data), { expectedSize: data.length });
  w.write(data);
  await w.finish();
}

t.test('small uploads beside a large one in flight are flushed on the threadpool; alone again, in line', async (t) => {
  const dir = tmpDir();
  const store = await JournalingBlobStore.open(await DiskBlobStore.open(dir), join(dir, 'journal'), {
    restore: async () => undefined,
    isWanted: async () => true,
    stored: async () => undefined,
    checkpoint: async () => undefined,
  });
  t.teardown(() => store.close());
  const large = randomBytes(3 << 20);
  const writer = await store.journal.createWriter('acme/game', oidOf(large), { expectedSize: large.length });
  writer.write(large.subarray(0, 1 << 20)); // in flight: a third of it sent
  await Promise.all(Array.from({ length: 4 }, () => put(store, randomBytes(30_000))));
  const beside = store.flushStats;
  t.equal(beside.inLine, 0, 'no flush held the event loop while the large upload was in flight');
  t.ok(beside.pooled >= 1, `the small uploads were flushed on the threadpool (${beside.pooled} flushes)`);
  await writer.abort();
  await put(store, randomBytes(30_000));
  t.equal(store.flushStats.inLine, 1, 'a lone small upload afterwards is flushed in line');
  t.equal(store.flushStats.records, 5, 'one record per finished upload');
});

import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { KeyRing } from '../../src/crypto/key-ring.js';
import type { DataKeyIndex, Index } from '../../src/db/index-types.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { jobOutcome } from '../../src/service/maintenance/job-outcome.js';
import { Progress } from '../../src/service/maintenance/job-runner.js';
import { runRewrap, type RewrapReport } from '../../src/service/maintenance/rewrap-job.js';
import { tmpDir } from '../helpers/start-server.js';

// The rewrap job on a real index and a real key ring: every row under an older key ends under the
// current one and unwraps to the data key it held; pages of SVC_REWRAP_BATCH rows; a job stopped
// part-way leaves valid rows and a second run does only the rest; a row changed between its read
// and its write is left to whoever changed it; a row no key of the ring opens is left and reported.

const line = (id: string): string => `${id} ${randomBytes(32).toString('base64')}`;
const K0 = line('k0');
const K1 = line('k1');
const K2 = line('k2');
const old = KeyRing.parse(K1);
const ring = KeyRing.parse(`${K2}\n${K1}\n`);

/** A fresh index holding `n` data keys wrapped by `by`; their raw keys by id. */
async function seeded(n: number, by: KeyRing): Promise<{ index: Index; plain: Map<string, Buffer> }> {
  const index = openSqliteIndex(join(tmpDir(), 'index.sqlite'));
  t.teardown(() => index.close());
  const plain = new Map<string, Buffer>();
  for (let i = 0; i < n; i++) plain.set(randomBytes(16).toString('hex'), randomBytes(32));
  for (const [id, key] of plain) await index.dataKeys.putDataKey({ dataKeyId: id, ...by.wrap(key, id) });
  return { index, plain };
}

function context(signal = new AbortController().signal): { signal: AbortSignal; progress: Progress } {
  return { signal, progress: new Progress() };
}

const quiet = (): void => undefined;

/** The index as the job sees it, its compare-and-set wrapped by `around` (what another writer does meanwhile). */
function withWrites(inner: DataKeyIndex, around: (write: () => Promise<boolean>, id: string, from: string) => Promise<boolean>): DataKeyIndex {
  return {
    putDataKey: (row) => inner.putDataKey(row),
    getDataKey: (id) => inner.getDataKey(id),
    dataKeysNotWrappedWith: (kek, after, limit) => inner.dataKeysNotWrappedWith(kek, after, limit),
    rewrapDataKey: (id, from, to, wrapped) => around(() => inner.rewrapDataKey(id, from, to, wrapped), id, from),
    kekIdsInUse: () => inner.kekIdsInUse(),
    deleteDataKey: (id) => inner.deleteDataKey(id),
    dataKeyIdsWrittenBefore: (before, after, limit) => inner.dataKeyIdsWrittenBefore(before, after, limit),
    deleteDataKeysWrittenBefore: (ids, before) => inner.deleteDataKeysWrittenBefore(ids, before),
  };
}

async function allUnder(dataKeys: DataKeyIndex, plain: Map<string, Buffer>, kekId: string): Promise<number> {
  let n = 0;
  for (const [id, key] of plain) {
    const row = (await dataKeys.getDataKey(id))!;
    if (row.kekId === kekId && ring.unwrap(row.kekId, id, row.wrapped).equals(key)) n++;
  }
  return n;
}

t.test('every data key under an older key is rewrapped under the current one, in pages', async (t) => {
  const { index, plain } = await seeded(23, old);
  const current = new Map<string, Buffer>();
  for (let i = 0; i < 4; i++) current.set(randomBytes(16).toString('hex'), randomBytes(32));
  for (const [id, key] of current) await index.dataKeys.putDataKey({ dataKeyId: id, ...ring.wrap(key, id) });
  const ctx = context();
  const r = await runRewrap({ keys: ring, dataKeys: index.dataKeys, batch: 4, sweep: null, journal: null, log: quiet }, ctx);
  t.match(r, { current_key: 'k2', data_keys: 23, rewrapped: 23, changed_meanwhile: 0, unwrappable: 0, object_bytes_written: 0, keys_in_use: ['k2'], retirable_keys: ['k1'], complete: true });
  t.equal(await allUnder(index.dataKeys, plain, 'k2'), 23, 'each row is under k2 and unwraps to the data key it held');
  t.equal(await allUnder(index.dataKeys, current, 'k2'), 4, 'rows already under k2 are as they were');
  t.same([ctx.progress.objectsDone, ctx.progress.objectsTotal], [23, 23], 'progress counts rows');
  t.equal(jobOutcome('rewrap', 'done', r), 'clean');
  const again = await runRewrap({ keys: ring, dataKeys: index.dataKeys, batch: 4, sweep: null, journal: null, log: quiet }, context());
  t.match(again, { data_keys: 0, rewrapped: 0, complete: true }, 'a second run finds nothing to do');
});

t.test('stopped part-way: every row stays valid, and the next run does only the rest', async (t) => {
  const { index, plain } = await seeded(30, old);
  const stop = new AbortController();
  let writes = 0;
  // A stop requested right after the 11th write (a shutdown, a cancel).
  const stopping = withWrites(index.dataKeys, async (write) => {
    const done = await write();
    if (++writes === 11) stop.abort();
    return done;
  });
  const first = await runRewrap({ keys: ring, dataKeys: stopping, batch: 4, sweep: null, journal: null, log: quiet }, context(stop.signal));
  t.match(first, { rewrapped: 11, complete: false, keys_in_use: ['k1', 'k2'], retirable_keys: [] }, 'the first run stops after the row in hand; k1 is still needed');
  t.equal((await allUnder(index.dataKeys, plain, 'k1')) + (await allUnder(index.dataKeys, plain, 'k2')), 30, 'every row holds a valid wrap');
  const second = await runRewrap({ keys: ring, dataKeys: index.dataKeys, batch: 4, sweep: null, journal: null, log: quiet }, context());
  t.match(second, { data_keys: 19, rewrapped: 19, complete: true, keys_in_use: ['k2'] }, 'the second run rewraps the 19 rows left, and only those');
  t.equal(await allUnder(index.dataKeys, plain, 'k2'), 30);
});

t.test('a row changed between its read and its write is left to whoever changed it', async (t) => {
  const { index, plain } = await seeded(6, old);
  const [raced, deleted] = [...plain.keys()].sort();
  // Another node's rewrap of one row, and a rekey's deletion of another, land just before our write.
  const racing = withWrites(index.dataKeys, async (write, id, from) => {
    if (id === raced) await index.dataKeys.rewrapDataKey(id, from, 'k2', ring.wrap(plain.get(id)!, id).wrapped);
    if (id === deleted) await index.dataKeys.deleteDataKey(id);
    return write();
  });
  const r: RewrapReport = await runRewrap({ keys: ring, dataKeys: racing, batch: 10, sweep: null, journal: null, log: quiet }, context());
  t.match(r, { data_keys: 6, rewrapped: 4, changed_meanwhile: 2, complete: true, keys_in_use: ['k2'] });
  t.equal(await index.dataKeys.getDataKey(deleted!), null, 'the deleted row stays deleted (no wrap written back)');
  t.equal(ring.unwrap('k2', raced!, (await index.dataKeys.getDataKey(raced!))!.wrapped).toString('hex'), plain.get(raced!)!.toString('hex'), "the other writer's wrap stands");
});

t.test('rows no key of the ring opens are left as they are and reported', async (t) => {
  const { index, plain } = await seeded(5, old);
  const stranger = randomBytes(16).toString('hex');
  await index.dataKeys.putDataKey({ dataKeyId: stranger, ...KeyRing.parse(K0).wrap(randomBytes(32), stranger) });
  const tampered = [...plain.keys()][0]!;
  const row = (await index.dataKeys.getDataKey(tampered))!;
  const bad = Buffer.from(row.wrapped);
  bad[20]! ^= 1;
  await index.dataKeys.deleteDataKey(tampered);
  await index.dataKeys.putDataKey({ ...row, wrapped: bad });
  const logged: object[] = [];
  const r = await runRewrap({ keys: ring, dataKeys: index.dataKeys, batch: 2, sweep: null, journal: null, log: (_m, f) => logged.push(f) }, context());
  t.match(r, { data_keys: 6, rewrapped: 4, unwrappable: 2, unwrappable_keys: ['k0', 'k1'], keys_in_use: ['k0', 'k1', 'k2'], complete: true });
  t.equal(jobOutcome('rewrap', 'done', r), 'problems', 'the outcome says there is something to look at');
  t.same((await index.dataKeys.getDataKey(tampered))!.wrapped, bad, 'the tampered row is not touched');
  t.equal(logged.length, 2, 'each is logged');
  t.notMatch(JSON.stringify(logged), new RegExp(K1.split(' ')[1]!.slice(0, 12).replace(/[+/]/g, '.')), 'without key material');
});

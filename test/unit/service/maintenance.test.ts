import { createHash, randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { openSqliteIndex } from '../../../src/db/sqlite/sqlite-index.js';
import { parseOid, type Oid } from '../../../src/protocol/oid.js';
import { JobRunner } from '../../../src/service/maintenance/job-runner.js';
import { forEachLimited } from '../../../src/service/maintenance/worker-tasks.js';
import { WorkerTasks } from '../../../src/service/maintenance/worker-tasks.js';
import { digestOf, pumpInto, type Pull } from '../../../src/service/maintenance/object-io.js';
import { TransferService } from '../../../src/service/transfer-service.js';
import { hashFile } from '../../../src/workers/maintenance.worker.js';
import { ByteMeter } from '../../../src/workers/byte-meter.js';
import { HashThread } from '../../../src/workers/hash-thread.js';
import { Metrics } from '../../../src/metrics/registry.js';
import { DiscardBlobStore } from '../../../src/store/discard.js';
import { FRAME_SIZE } from '../../../src/format/frame-format.js';
import { jobOutcome } from '../../../src/service/maintenance/job-outcome.js';
import { tmpDir } from '../../helpers/start-server.js';

const dir = tmpDir('stowage-unit-maint-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const text = (n: number): Buffer => {
  const out = Buffer.alloc(n);
  let at = 0;
  for (let i = 0; at < n; i++) at += out.write(`line ${i} ${i % 13} ${i * 3}\n`, at);
  return out;
};

t.test('maintenance worker: hashFile hashes a plain file as it is, in chunks, and says when it is gone', async (t) => {
  const data = text(9 * 1024 * 1024 + 11);
  const plain = join(dir, 'plain');
  writeFileSync(plain, data);
  const m = new ByteMeter();
  t.match(hashFile({ path: plain, meter: m.buffer }), { outcome: 'ok', sha256: sha(data), size: data.length });
  t.equal(m.read(), data.length, 'every byte read is reported');
  t.equal(hashFile({ path: join(dir, 'none') }).outcome, 'missing');
  t.equal(hashFile({ path: dir }).outcome, 'unreadable', 'a folder cannot be read as an object');
});

/** Pulls `data` in chunks of the given sizes (cycled), each a fresh view that the next pull overwrites. */
function pullOf(data: Buffer, sizes: number[]): Pull {
  let at = 0;
  let i = 0;
  const scratch = Buffer.alloc(Math.max(...sizes));
  return async () => {
    if (at >= data.length) return null;
    const n = Math.min(sizes[i++ % sizes.length]!, data.length - at);
    data.copy(scratch, 0, at, at + n);
    at += n;
    return scratch.subarray(0, n);
  };
}

t.test('digestOf: the sha256 of what is pulled, off the event loop for large objects, reporting bytes as it goes', async (t) => {
  const hasher = new HashThread();
  t.teardown(() => hasher.close());
  // Irregular chunks across the 1 MiB blocks, more blocks than may be in flight at once.
  for (const size of [0, 1, 65_536, (1 << 20) - 1, (1 << 20) + 1, 9 * (1 << 20) + 12_345]) {
    const data = randomBytes(size);
    const seen: number[] = [];
    const r = await digestOf(pullOf(data, [777_777, 1 << 20, 3, 300_001]), size, hasher, (n) => seen.push(n));
    t.same(r, { sha256: sha(data), size }, `${size} bytes`);
    if (size > 0) t.equal(seen.at(-1), size, 'the running count reaches the size');
  }
  // Where the source fails midway, the failure comes out (and the stream is dropped, not left open).
  let n = 0;
  const failing: Pull = async () => {
    if (n++ === 3) throw new Error('bucket went away');
    return Buffer.alloc(1 << 20, n);
  };
  await t.rejects(digestOf(failing, 8 << 20, hasher, () => undefined), /bucket went away/);
  const after = randomBytes(3 << 20);
  t.same(await digestOf(pullOf(after, [1 << 20]), after.length, hasher, () => undefined), { sha256: sha(after), size: after.length }, 'the hasher is still usable');
});

t.test('WorkerTasks is a FrameCodec: frames compressed and decoded on the maintenance pool', async (t) => {
  const tasks = new WorkerTasks(1);
  t.teardown(() => tasks.close());
  const frame = text(FRAME_SIZE);
  const input = new Uint8Array(new ArrayBuffer(FRAME_SIZE));
  input.set(frame);
  const c = await tasks.compress({ input, length: FRAME_SIZE, out: new ArrayBuffer(FRAME_SIZE + 4096), level: 3, attempt: true });
  t.equal(c.codec, 1, 'text compresses');
  t.ok(c.storedLength < FRAME_SIZE / 2);
  const stored = new ArrayBuffer(c.storedLength);
  new Uint8Array(stored).set(new Uint8Array(c.out, 0, c.storedLength));
  const d = await tasks.decode({ stored, storedLength: c.storedLength, codec: 1, digest: c.digest, out: new ArrayBuffer(FRAME_SIZE), length: FRAME_SIZE });
  t.equal(d.damage, null);
  t.ok(Buffer.from(d.out, 0, FRAME_SIZE).equals(frame), 'decodes to the same bytes');
  const bad = new ArrayBuffer(c.storedLength);
  new Uint8Array(bad).set(new Uint8Array(c.out, 0, c.storedLength));
  new Uint8Array(bad)[10]! ^= 1;
  const e = await tasks.decode({ stored: bad, storedLength: c.storedLength, codec: 1, digest: c.digest, out: new ArrayBuffer(FRAME_SIZE), length: FRAME_SIZE });
  t.match(e.damage, /BLAKE3/, 'a damaged frame is caught by its digest');
});

t.test('DiscardBlobStore: a writer counts what it is given, keeps nothing, releases lent chunks', async (t) => {
  const store = new DiscardBlobStore(1 << 20);
  const oid = parseOid('b'.repeat(64))!;
  const w = await store.createWriter(oid, { expectedSize: null });
  let released = 0;
  t.equal(w.write(Buffer.alloc(1000)), true);
  t.equal(w.write(Buffer.alloc(24), () => released++), true);
  const put = await pumpInto(pullOf(Buffer.alloc(5000), [999]), w, () => undefined);
  t.same(put, { size: 6024, storedSize: 6024, created: true });
  t.equal(released, 1, 'the lent chunk was released once');
  t.equal(await store.open(oid), null, 'nothing is stored');
  t.equal(await store.stat(oid), null);
});

t.test('TransferService deletion gate: a write of an oid being deleted waits for the delete, and counts as in flight meanwhile', async (t) => {
  const db = openSqliteIndex(join(dir, 'gate.sqlite'));
  t.teardown(() => db.close());
  const transfers = new TransferService(new DiscardBlobStore(1 << 20), db.objects, new Metrics());
  const oid = parseOid('c'.repeat(64))!;
  const other = parseOid('d'.repeat(64))!;
  const open = transfers.markDeleting(oid);
  const order: string[] = [];
  const write = transfers.asUpload(oid, async () => {
    order.push('write');
    return 7;
  });
  t.equal(transfers.isUploading(oid), true, 'in flight from the call on, so retain leaves it alone');
  t.equal(await transfers.asUpload(other, async () => 'free'), 'free', 'another oid is not held up');
  // Let every pending step run: the write must still be waiting for the gate.
  await new Promise((r) => setImmediate(r));
  t.same(order, [], 'the write has not begun while the delete is under way');
  order.push('deleted');
  open();
  t.equal(await write, 7);
  t.same(order, ['deleted', 'write'], 'it begins once the delete settled');
  t.equal(transfers.isUploading(oid), false);
  // A gate opened before any write arrives holds nothing up.
  transfers.markDeleting(oid)();
  t.equal(await transfers.asUpload(oid, async () => 'at once'), 'at once');
});

t.test('MaintenanceRepo: dropping the last reference removes the row and records an intent; quarantine hides an object', async (t) => {
  const db = openSqliteIndex(join(dir, 'index.sqlite'));
  t.teardown(() => db.close());
  const objects = db.objects;
  const maint = db.maintenance;
  const oid = parseOid('a'.repeat(64))!;
  const now = Date.now();
  await objects.addReference('o/one', oid, 10, 10);
  await objects.addReference('o/two', oid, 10, 10);
  t.equal(await maint.dropReference('o/one', oid, now, ''), 'kept', 'another repository still references it');
  t.ok(await objects.findShared(oid));
  t.equal(await maint.dropReference('o/two', oid, now, ''), 'delete', 'the last reference: the file must go');
  t.equal(await objects.findShared(oid), null);
  t.same(await maint.pendingDeletes(now), [oid]);
  await maint.deleted(oid);
  t.same(await maint.pendingDeletes(now), []);

  await objects.addReference('o/one', oid, 10, 10);
  t.equal(await objects.isQuarantined(oid), false);
  await maint.quarantine(oid, 'o/one', 'corrupt');
  t.equal(await objects.findInRepo('o/one', oid), null, 'quarantined: missing to batch and downloads');
  t.equal((await maint.repoObjects('o/one'))[0]!.quarantined, true);
  t.equal(await objects.isQuarantined(oid), true, 'the mark is seen by the uploads of the same index');
  // A server started on an index that already holds marks must see them too (they are not only
  // known to the connection that wrote them).
  const again = openSqliteIndex(join(dir, 'index.sqlite'));
  t.equal(await again.objects.isQuarantined(oid), true, 'marks already in the index are seen at start');
  await again.close();
  await objects.addReference('o/one', oid, 10, 8);
  t.equal(await objects.isQuarantined(oid), false, 'healed');
  t.ok(await objects.findInRepo('o/one', oid), 'good bytes uploaded again lift the quarantine');
  t.equal((await objects.findShared(oid))!.storedSize, 8, 'and the row describes the new file');
});

t.test('JobRunner: joins a duplicate request, records progress and report, marks killed jobs interrupted', async (t) => {
  const db = openSqliteIndex(join(dir, 'jobs.sqlite'));
  t.teardown(() => db.close());
  const logs: string[] = [];
  const runner = await JobRunner.open(db.jobs, null, (m) => logs.push(m));
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const a = await runner.start('audit', 'o/r', false, async (ctx) => {
    ctx.progress.objectsTotal = 2;
    await gate;
    ctx.progress.objectsDone = 2;
    return { ok: 2 };
  });
  const b = await runner.start('audit', 'o/r', false, async () => ({ ok: -1 }));
  t.equal(b, a, 'a second request for the same job joins it');
  const c = await runner.start('compress', 'o/r', true, async () => ({ compressed: 0 }));
  t.equal(c.state, 'queued', 'jobs of one repository run one after another');
  release();
  t.same(await a.done, { ok: 2 });
  t.same(await c.done, { compressed: 0 });
  t.match(await runner.find('o/r', a.id), { state: 'done', objects_done: 2, objects_total: 2, report: { ok: 2 } });
  t.equal(await runner.find('x/y', a.id), null, "another repository's job is not found");

  const failing = await runner.start('dedupe', 'o/r', false, async () => {
    throw new Error('boom');
  });
  await t.rejects(failing.done);
  t.match(await runner.find('o/r', failing.id), { state: 'failed', error: 'the job failed; see the server log' });

  // A job still running when the process dies is interrupted at the next start.
  await db.jobs.insert('killed-job', 'retain', 'o/r', false, Date.now(), '');
  const again = await JobRunner.open(db.jobs, null, (m) => logs.push(m));
  t.match(await again.find('o/r', 'killed-job'), { state: 'interrupted' });
  t.ok(logs.some((l) => /interrupted/.test(l)));
  await runner.close();
  await again.close();
});

t.test('JobRunner: cancel stops a running job between objects and a queued one at once; bytes in hand count; outcome', async (t) => {
  const db = openSqliteIndex(join(dir, 'cancel.sqlite'));
  t.teardown(() => db.close());
  const runner = await JobRunner.open(db.jobs, null, () => undefined);
  t.teardown(() => runner.close());
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let inHand!: () => void;
  const reading = new Promise<void>((r) => (inHand = r));
  let meterOf!: ByteMeter;
  const a = await runner.start('audit', 'o/r', true, async (ctx) => {
    ctx.progress.objectsTotal = 3;
    ctx.progress.bytesTotal = 300;
    let done = 0;
    const complete = await forEachLimited([1, 2, 3], 1, ctx.signal, async () => {
      const meter = ctx.progress.meter();
      meterOf = meter;
      inHand();
      await gate; // the first object is "being read" until released
      ctx.progress.objectDone(100, meter);
      done++;
    });
    return { objects: done, corrupt: 0, unreadable: 0, complete };
  });
  const queued = await runner.start('compress', 'o/r', false, async () => ({ compressed: 1 }));
  await reading;
  // A worker's meter shows 40 bytes read of the object in hand.
  Atomics.store(new BigInt64Array(meterOf.buffer), 0, 40n);
  t.match(await runner.find('o/r', a.id), { state: 'running', outcome: null, bytes_done: 40, objects_done: 0 }, 'bytes within an object count');
  t.match(await runner.jobsOf('o/r'), [{ id: queued.id }, { id: a.id }], 'the repository\'s jobs, newest first');

  t.match(await runner.cancel('o/r', queued.id), { state: 'cancelled', outcome: 'cancelled' }, 'a queued job is cancelled at once');
  t.match(await runner.cancel('o/r', a.id), { state: 'running', finished_at: null }, 'a running job finishes the object in hand first');
  t.equal(await runner.cancel('x/y', a.id), null, "another repository's job cannot be cancelled");
  release();
  t.match(await a.done, { objects: 1, complete: false }, 'those waiting get what it did before it stopped');
  t.match(await runner.find('o/r', a.id), { state: 'cancelled', outcome: 'cancelled', objects_done: 1, bytes_done: 100 });
  t.same(await queued.done, {}, 'the queued job never ran');
  t.match(await db.jobs.get(a.id), { state: 'cancelled' }, 'the table says cancelled too');
  t.match(await runner.cancel('o/r', a.id), { state: 'cancelled' }, 'cancelling a finished job leaves it as it is');

  t.equal(jobOutcome('audit', 'done', { corrupt: 1, unreadable: 0, complete: true }), 'problems');
  t.equal(jobOutcome('audit', 'done', { corrupt: 0, unreadable: 0, complete: true }), 'clean');
  t.equal(jobOutcome('dedupe', 'done', { refused: 2, unreadable: 0, complete: true }), 'problems');
  t.equal(jobOutcome('compress', 'done', { refused: 0, complete: false }), 'problems', 'a job that did not cover everything');
  t.equal(jobOutcome('retain', 'done', { swept: 3, complete: true }), 'clean');
  t.equal(jobOutcome('audit', 'running', null), null);
  t.equal(jobOutcome('audit', 'interrupted', null), 'interrupted');
});

t.test('forEachLimited runs at most `limit` at once and stops on abort', async (t) => {
  let active = 0;
  let peak = 0;
  const ran: number[] = [];
  const ac = new AbortController();
  const done = await forEachLimited([1, 2, 3, 4, 5, 6], 2, ac.signal, async (n) => {
    active++;
    peak = Math.max(peak, active);
    await new Promise(setImmediate); // a turn of the event loop, so the lanes overlap
    ran.push(n);
    if (n === 3) ac.abort();
    active--;
  });
  t.equal(peak, 2);
  t.equal(done, false, 'reports that it stopped early');
  t.ok(ran.length < 6);
  const oids: Oid[] = [];
  t.equal(await forEachLimited(oids, 4, new AbortController().signal, async () => undefined), true, 'an empty list is complete');
});

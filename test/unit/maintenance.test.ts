import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync, readSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { openDatabase } from '../../src/db/database.js';
import { JobsRepo, MaintenanceRepo } from '../../src/db/jobs-repo.js';
import { ObjectsRepo } from '../../src/db/objects-repo.js';
import { parseOid, type Oid } from '../../src/protocol/oid.js';
import { JobRunner } from '../../src/service/maintenance/job-runner.js';
import { forEachLimited } from '../../src/service/maintenance/worker-tasks.js';
import { compressFile, hashFile } from '../../src/workers/maintenance.worker.js';
import { ByteMeter } from '../../src/workers/byte-meter.js';
import { FRAME_SIZE } from '../../src/store/buffer-pool.js';
import { INDEX_ENTRY_SIZE, TRAILER_SIZE } from '../../src/store/frame-format.js';
import { jobOutcome } from '../../src/service/maintenance/job-outcome.js';
import { tmpDir } from '../helpers/start-server.js';

const dir = tmpDir('stowage-unit-maint-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const text = (n: number): Buffer => {
  const out = Buffer.alloc(n);
  let at = 0;
  for (let i = 0; at < n; i++) at += out.write(`line ${i} ${i % 13} ${i * 3}\n`, at);
  return out;
};

t.test('maintenance worker: compress → framed file hashes back to the same oid; damage is caught', async (t) => {
  const data = text(9 * 1024 * 1024 + 11);
  const plain = join(dir, 'plain');
  writeFileSync(plain, data);
  const h = hashFile({ path: plain });
  t.match(h, { outcome: 'ok', sha256: sha(data), size: data.length, framed: false });

  const dry = compressFile({ path: plain, outPath: null, level: 3 });
  t.equal(dry.outcome, 'framed');
  t.equal(dry.sha256, sha(data), 'the digest of the plain bytes comes back for checking');
  const framed = join(dir, 'framed');
  const real = compressFile({ path: plain, outPath: framed, level: 3 });
  t.equal(real.framedSize, dry.framedSize, 'a dry run measures exactly what the real run writes');
  t.equal(statSync(framed).size, real.framedSize);
  t.match(hashFile({ path: framed }), { outcome: 'ok', sha256: sha(data), size: data.length, framed: true });
  t.match(hashFile({ path: framed, plainOnly: true }), { outcome: 'ok', framed: false }, 'plainOnly reads the bytes as they are');
  t.equal(compressFile({ path: framed, outPath: null, level: 3 }).outcome, 'already_framed');

  const fd = openSync(framed, 'r+');
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, 10);
  b[0] = b[0]! ^ 0x80;
  writeSync(fd, b, 0, 1, 10);
  closeSync(fd);
  const bad = hashFile({ path: framed });
  t.equal(bad.outcome, 'unreadable', 'a damaged frame cannot be read');
  t.match(bad.detail, /BLAKE3/);
  t.equal(hashFile({ path: join(dir, 'none') }).outcome, 'missing');

  const noise = join(dir, 'noise');
  writeFileSync(noise, randomBytes(5 << 20));
  const n = join(dir, 'noise.framed');
  t.equal(compressFile({ path: noise, outPath: n, level: 3 }).outcome, 'not_smaller');
  t.throws(() => readFileSync(n), 'nothing is left behind when framing saves nothing');
});

t.test('MaintenanceRepo: dropping the last reference removes the row and records an intent; quarantine hides an object', async (t) => {
  const db = openDatabase(join(dir, 'index.sqlite'));
  t.teardown(() => db.close());
  const objects = new ObjectsRepo(db);
  const maint = new MaintenanceRepo(db);
  const oid = parseOid('a'.repeat(64))!;
  objects.addReference('o/one', oid, 10, 10);
  objects.addReference('o/two', oid, 10, 10);
  t.equal(maint.dropReference('o/one', oid), false, 'another repository still references it');
  t.ok(objects.findShared(oid));
  t.equal(maint.dropReference('o/two', oid), true, 'the last reference: the file must go');
  t.equal(objects.findShared(oid), null);
  t.same(maint.pendingDeletes(), [oid]);
  maint.deleted(oid);
  t.same(maint.pendingDeletes(), []);

  objects.addReference('o/one', oid, 10, 10);
  t.equal(objects.isQuarantined(oid), false);
  maint.quarantine(oid, 'o/one', 'corrupt');
  t.equal(objects.findInRepo('o/one', oid), null, 'quarantined: missing to batch and downloads');
  t.equal(maint.repoObjects('o/one')[0]!.quarantined, true);
  t.equal(objects.isQuarantined(oid), true, 'the mark is seen by the uploads of the same index');
  // A server started on an index that already holds marks must see them too (they are not only
  // known to the connection that wrote them).
  const again = openDatabase(join(dir, 'index.sqlite'));
  t.equal(new ObjectsRepo(again).isQuarantined(oid), true, 'marks already in the index are seen at start');
  again.close();
  objects.addReference('o/one', oid, 10, 8);
  t.equal(objects.isQuarantined(oid), false, 'healed');
  t.ok(objects.findInRepo('o/one', oid), 'good bytes uploaded again lift the quarantine');
  t.equal(objects.findShared(oid)!.storedSize, 8, 'and the row describes the new file');
});

t.test('JobRunner: joins a duplicate request, records progress and report, marks killed jobs interrupted', async (t) => {
  const db = openDatabase(join(dir, 'jobs.sqlite'));
  t.teardown(() => db.close());
  const logs: string[] = [];
  const runner = new JobRunner(new JobsRepo(db), (m) => logs.push(m));
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const a = runner.start('audit', 'o/r', false, async (ctx) => {
    ctx.progress.objectsTotal = 2;
    await gate;
    ctx.progress.objectsDone = 2;
    return { ok: 2 };
  });
  const b = runner.start('audit', 'o/r', false, async () => ({ ok: -1 }));
  t.equal(b, a, 'a second request for the same job joins it');
  const c = runner.start('compress', 'o/r', true, async () => ({ compressed: 0 }));
  t.equal(c.state, 'queued', 'jobs of one repository run one after another');
  release();
  t.same(await a.done, { ok: 2 });
  t.same(await c.done, { compressed: 0 });
  t.match(runner.find('o/r', a.id), { state: 'done', objects_done: 2, objects_total: 2, report: { ok: 2 } });
  t.equal(runner.find('x/y', a.id), null, "another repository's job is not found");

  const failing = runner.start('dedupe', 'o/r', false, async () => {
    throw new Error('boom');
  });
  await t.rejects(failing.done);
  t.match(runner.find('o/r', failing.id), { state: 'failed', error: 'the job failed; see the server log' });

  // A job still running when the process dies is interrupted at the next start.
  new JobsRepo(db).insert('killed-job', 'retain', 'o/r', false, Date.now());
  const again = new JobRunner(new JobsRepo(db), (m) => logs.push(m));
  t.match(again.find('o/r', 'killed-job'), { state: 'interrupted' });
  t.ok(logs.some((l) => /interrupted/.test(l)));
  await runner.close();
  await again.close();
});

t.test('the worker reports bytes as it reads: frame by frame, so a read stopped in the last frame shows the frames before it', async (t) => {
  const data = text(3 * FRAME_SIZE + 5);
  const plain = join(dir, 'metered');
  writeFileSync(plain, data);
  const m = new ByteMeter();
  t.match(hashFile({ path: plain, meter: m.buffer }), { outcome: 'ok' });
  t.equal(m.read(), data.length, 'a plain read reports every byte');
  const framed = join(dir, 'metered.framed');
  const c = new ByteMeter();
  t.equal(compressFile({ path: plain, outPath: framed, level: 3, meter: c.buffer }).outcome, 'framed');
  t.equal(c.read(), data.length, 'compress reports the plain bytes it read');
  // Damage the last byte of the last stored frame (it ends where the index begins).
  const frames = Math.ceil(data.length / FRAME_SIZE);
  const at = statSync(framed).size - TRAILER_SIZE - frames * INDEX_ENTRY_SIZE - 1;
  const fd = openSync(framed, 'r+');
  writeSync(fd, Buffer.from([0x5a ^ readFileSync(framed)[at]!]), 0, 1, at);
  closeSync(fd);
  const f = new ByteMeter();
  t.equal(hashFile({ path: framed, meter: f.buffer }).outcome, 'unreadable');
  t.equal(f.read(), (frames - 1) * FRAME_SIZE, 'every frame read before the damaged one was reported');
});

t.test('JobRunner: cancel stops a running job between objects and a queued one at once; bytes in hand count; outcome', async (t) => {
  const db = openDatabase(join(dir, 'cancel.sqlite'));
  t.teardown(() => db.close());
  const runner = new JobRunner(new JobsRepo(db), () => undefined);
  t.teardown(() => runner.close());
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let inHand!: () => void;
  const reading = new Promise<void>((r) => (inHand = r));
  let meterOf!: ByteMeter;
  const a = runner.start('audit', 'o/r', true, async (ctx) => {
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
  const queued = runner.start('compress', 'o/r', false, async () => ({ compressed: 1 }));
  await reading;
  // A worker's meter shows 40 bytes read of the object in hand.
  Atomics.store(new BigInt64Array(meterOf.buffer), 0, 40n);
  t.match(runner.find('o/r', a.id), { state: 'running', outcome: null, bytes_done: 40, objects_done: 0 }, 'bytes within an object count');
  t.match(runner.jobsOf('o/r'), [{ id: queued.id }, { id: a.id }], 'the repository\'s jobs, newest first');

  t.match(runner.cancel('o/r', queued.id), { state: 'cancelled', outcome: 'cancelled' }, 'a queued job is cancelled at once');
  t.match(runner.cancel('o/r', a.id), { state: 'running', finished_at: null }, 'a running job finishes the object in hand first');
  t.equal(runner.cancel('x/y', a.id), null, "another repository's job cannot be cancelled");
  release();
  t.match(await a.done, { objects: 1, complete: false }, 'those waiting get what it did before it stopped');
  t.match(runner.find('o/r', a.id), { state: 'cancelled', outcome: 'cancelled', objects_done: 1, bytes_done: 100 });
  t.same(await queued.done, {}, 'the queued job never ran');
  t.match(new JobsRepo(db).get(a.id), { state: 'cancelled' }, 'the table says cancelled too');
  t.match(runner.cancel('o/r', a.id), { state: 'cancelled' }, 'cancelling a finished job leaves it as it is');

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
    await new Promise((r) => setTimeout(r, 5));
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

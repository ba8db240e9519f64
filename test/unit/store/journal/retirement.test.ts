import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { parseOid, type Oid } from '../../../../src/protocol/oid.js';
import { DiskBlobStore } from '../../../../src/store/disk.js';
import { CompressingBlobStore } from '../../../../src/store/layers/compress.js';
import { JournalingBlobStore } from '../../../../src/store/journal/journaling-store.js';
import type { BlobStore } from '../../../../src/store/types.js';
import { WorkerPool } from '../../../../src/workers/pool.js';
import { tmpDir } from '../../../helpers/start-server.js';

// Retirement writes journaled small objects to files of their own, several at a time, and deletes a
// segment only once all of its objects have files: a lane that fails must leave the segment (and
// every object's bytes) in place for the next try.

const segments = (dir: string): string[] => readdirSync(join(dir, 'journal')).filter((n) => n.startsWith('seg-'));
/** The journals' clock, moved by hand: retirement waits for a 1 s lull in appends. */
let now = Date.now();
const clock = (): number => now;
const idle = (): void => void (now += 1000);

async function put(store: JournalingBlobStore, data: Buffer): Promise<Oid> {
  const oid = parseOid(createHash('sha256').update(data).digest('hex'))!;
  const w = await store.journal.createWriter('acme/game', oid, { expectedSize: data.length });
  w.write(data);
  await w.finish();
  return oid;
}

/** A store in a new dir holding 40 small objects in its journal only (no files yet). */
async function journaledStore(
  t: Test,
  below: (disk: DiskBlobStore) => BlobStore = (disk) => disk,
  objs = Array.from({ length: 40 }, (_, i) => randomBytes(10_000 + i * 100)),
): Promise<{ dir: string; store: JournalingBlobStore; disk: DiskBlobStore; objs: Buffer[]; oids: Oid[]; reported: Map<Oid, number> }> {
  const dir = tmpDir();
  const disk = await DiskBlobStore.open(dir);
  // The index's side of the port: every object is wanted; stored sizes are recorded as reported.
  const reported = new Map<Oid, number>();
  const store = await JournalingBlobStore.open(below(disk), join(dir, 'journal'), {
    restore: async () => undefined,
    isWanted: async () => true,
    stored: async (oid, size) => void reported.set(oid, size),
    checkpoint: async () => undefined,
  }, clock);
  t.teardown(() => store.close());
  const oids: Oid[] = [];
  for (const d of objs) oids.push(await put(store, d));
  return { dir, store, disk, objs, oids, reported };
}

t.test('every journaled object gets its file, then the segments go', async (t) => {
  const { dir, store, disk, objs, oids, reported } = await journaledStore(t);
  t.notOk(existsSync(disk.pathOf(oids[0]!)), 'acknowledged from the journal, no file yet');
  idle();
  t.ok((await store.retire()) >= 1, 'a segment retired');
  for (const [i, oid] of oids.entries()) {
    t.ok(readFileSync(disk.pathOf(oid)).equals(objs[i]!), `object ${i} has its own file, byte for byte`);
    // The index was given the object's size at upload; a plain copy takes just that, nothing to write.
    t.equal(reported.get(oid), undefined, `object ${i}: a plain copy's size is not written to the index again`);
  }
  t.same(segments(dir), [], 'no segment left');
});

t.test('a copy the layer below compressed has its stored size reported to the index', async (t) => {
  const codec = new WorkerPool(1);
  t.teardown(() => codec.close());
  // Compressible (text-like) and random objects side by side: only the compressed ones changed size.
  const objs = Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? Buffer.from('stowage '.repeat(4000 + i)) : randomBytes(30_000 + i)));
  const { store, disk, oids, reported } = await journaledStore(t, (d) => new CompressingBlobStore(d, codec, 3), objs);
  idle();
  t.ok((await store.retire()) >= 1, 'a segment retired');
  for (const [i, oid] of oids.entries()) {
    const onDisk = statSync(disk.pathOf(oid)).size;
    if (i % 2 === 0) {
      t.ok(onDisk < objs[i]!.length, `object ${i}: stored compressed (${onDisk} of ${objs[i]!.length} bytes)`);
      t.equal(reported.get(oid), onDisk, `object ${i}: its stored size is reported`);
    } else {
      t.equal(onDisk, objs[i]!.length, `object ${i}: stored as it came`);
      t.equal(reported.get(oid), undefined, `object ${i}: nothing to report`);
    }
  }
});

t.test('a failing object stops retirement and keeps its segment until it succeeds', async (t) => {
  const { dir, store, disk, objs, oids } = await journaledStore(t);
  // A file where one object's fan-out directory must go: its materialization fails.
  const blocker = join(dir, 'objects', oids[7]!.slice(0, 2));
  writeFileSync(blocker, 'in the way');
  idle();
  await t.rejects(store.retire(), 'retirement reports the failure');
  t.ok(segments(dir).length >= 1, 'the segment is kept');
  t.notOk(existsSync(disk.pathOf(oids[7]!)), 'the blocked object has no file');
  rmSync(blocker);
  t.ok((await store.retire()) >= 1, 'the next try retires it');
  for (const [i, oid] of oids.entries()) t.ok(readFileSync(disk.pathOf(oid)).equals(objs[i]!), `object ${i} has its own file, byte for byte`);
  t.same(segments(dir), [], 'no segment left');
});

t.test('a reference kept while a round runs holds its segment until the index takes it', async (t) => {
  const dir = tmpDir();
  const disk = await DiskBlobStore.open(dir);
  // The index's side of the port: it holds what it was given, and the test lands a refused commit
  // in the middle of a round (at its first question).
  const held = new Set<Oid>();
  let midRound: (() => void) | null = null;
  const store = await JournalingBlobStore.open(disk, join(dir, 'journal'), {
    restore: async (_repo, oid) => void held.add(oid),
    isWanted: async (oid) => {
      const land = midRound;
      midRound = null;
      land?.();
      return held.has(oid);
    },
    stored: async () => undefined,
    checkpoint: async () => undefined,
  }, clock);
  t.teardown(() => store.close());
  const write = async (data: Buffer) => {
    const oid = parseOid(createHash('sha256').update(data).digest('hex'))!;
    const w = await store.journal.createWriter('acme/game', oid, { expectedSize: data.length });
    w.write(data);
    return { oid, put: await w.finish() };
  };
  const taken = await write(randomBytes(20_000));
  held.add(taken.oid);
  const lateBytes = randomBytes(20_000);
  const late = await write(lateBytes);
  t.type(late.put.keepReference, 'function', 'the journal offers to keep the reference (its disk has room)');
  midRound = () => late.put.keepReference!();

  idle();
  t.equal(await store.retire(), 0, 'the round retires nothing: a reference its segment may hold came back while it ran');
  t.ok(segments(dir).length > 0, 'the segment stays');
  t.equal(store.deferredReferences, 1, 'the reference waits for the index');
  t.ok((await store.retire()) >= 1, 'the next round gives it to the index first, then retires');
  t.ok(held.has(late.oid), 'the index holds it');
  t.ok(readFileSync(disk.pathOf(late.oid)).equals(lateBytes), 'its bytes reached a file of their own');
  t.same(segments(dir), [], 'no segment left');
});

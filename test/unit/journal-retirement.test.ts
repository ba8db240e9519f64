import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { parseOid, type Oid } from '../../src/protocol/oid.js';
import { DiskBlobStore } from '../../src/store/disk.js';
import { JournalingBlobStore } from '../../src/store/layers/journal.js';
import { tmpDir } from '../helpers/start-server.js';

// Retirement writes journaled small objects to files of their own, several at a time, and deletes a
// segment only once all of its objects have files: a lane that fails must leave the segment (and
// every object's bytes) in place for the next try.

const segments = (dir: string): string[] => readdirSync(join(dir, 'journal')).filter((n) => n.startsWith('seg-'));
const idle = (): Promise<void> => new Promise((r) => setTimeout(r, 1100)); // retirement waits for a 1 s lull

async function put(store: JournalingBlobStore, data: Buffer): Promise<Oid> {
  const oid = parseOid(createHash('sha256').update(data).digest('hex'))!;
  const w = await store.createWriter(oid, { repo: 'acme/game', expectedSize: data.length });
  w.write(data);
  await w.finish();
  return oid;
}

/** A store in a new dir holding 40 small objects in its journal only (no files yet). */
async function journaledStore(t: Test): Promise<{ dir: string; store: JournalingBlobStore; disk: DiskBlobStore; objs: Buffer[]; oids: Oid[]; reported: Map<Oid, number> }> {
  const dir = tmpDir();
  const disk = await DiskBlobStore.open(dir);
  // The index's side of the port: every object is wanted; stored sizes are recorded as reported.
  const reported = new Map<Oid, number>();
  const store = await JournalingBlobStore.open(disk, join(dir, 'journal'), {
    restore: async () => undefined,
    isWanted: async () => true,
    stored: async (oid, size) => void reported.set(oid, size),
    checkpoint: async () => undefined,
  });
  t.teardown(() => store.close());
  const objs = Array.from({ length: 40 }, (_, i) => randomBytes(10_000 + i * 100));
  const oids: Oid[] = [];
  for (const d of objs) oids.push(await put(store, d));
  return { dir, store, disk, objs, oids, reported };
}

t.test('every journaled object gets its file, then the segments go', async (t) => {
  const { dir, store, disk, objs, oids, reported } = await journaledStore(t);
  t.notOk(existsSync(disk.pathOf(oids[0]!)), 'acknowledged from the journal, no file yet');
  await idle();
  t.ok((await store.retire()) >= 1, 'a segment retired');
  for (const [i, oid] of oids.entries()) {
    t.ok(readFileSync(disk.pathOf(oid)).equals(objs[i]!), `object ${i} has its own file, byte for byte`);
    t.equal(reported.get(oid), objs[i]!.length, `object ${i}: its stored size is reported to the index`);
  }
  t.same(segments(dir), [], 'no segment left');
});

t.test('a failing object stops retirement and keeps its segment until it succeeds', async (t) => {
  const { dir, store, disk, objs, oids } = await journaledStore(t);
  // A file where one object's fan-out directory must go: its materialization fails.
  const blocker = join(dir, 'objects', oids[7]!.slice(0, 2));
  writeFileSync(blocker, 'in the way');
  await idle();
  await t.rejects(store.retire(), 'retirement reports the failure');
  t.ok(segments(dir).length >= 1, 'the segment is kept');
  t.notOk(existsSync(disk.pathOf(oids[7]!)), 'the blocked object has no file');
  rmSync(blocker);
  t.ok((await store.retire()) >= 1, 'the next try retires it');
  for (const [i, oid] of oids.entries()) t.ok(readFileSync(disk.pathOf(oid)).equals(objs[i]!), `object ${i} has its own file, byte for byte`);
  t.same(segments(dir), [], 'no segment left');
});

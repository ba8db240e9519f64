import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { KeyRing } from '../../../../src/crypto/key-ring.js';
import { StartRefusedError } from '../../../../src/errors/start-refused.js';
import { parseOid, type Oid } from '../../../../src/protocol/oid.js';
import { DiskBlobStore } from '../../../../src/store/disk.js';
import { JournalingBlobStore, type ReferenceLog } from '../../../../src/store/journal/journaling-store.js';
import { SegmentLog } from '../../../../src/store/journal/segment-log.js';
import { tmpDir } from '../../../helpers/start-server.js';
import { flipByte } from '../../../helpers/data.js';

// With encryption at rest the journal holds small objects' bytes sealed under a key per segment,
// wrapped by the key ring: no byte of an object in the clear in a segment; replay, retirement and
// downloads read them back; a sealed record that does not authenticate is never served; a start
// whose ring lacks a segment's key refuses, naming it.

const keyLine = (id: string): string => `${id} ${randomBytes(32).toString('base64')}`;
const [k1, k2] = [keyLine('k1'), keyLine('k2')];
const ring = KeyRing.parse(k1);
const oidOf = (data: Buffer): Oid => parseOid(createHash('sha256').update(data).digest('hex'))!;
const refs: ReferenceLog = { restore: async () => undefined, isWanted: async () => true, stored: async () => undefined, checkpoint: async () => undefined };
/** The journal's clock, moved by hand: retirement waits for a 1 s lull in appends. */
let now = Date.now();
const clock = (): number => now;

/** Objects marked with a known string, tiny to past the in-line read size. */
function marked(tag: string): { marker: string; data: Buffer }[] {
  return [40, 64 << 10, 300_000].map((size, i) => {
    const marker = `PLAINTEXT-MARKER-${tag}-${i}-${randomBytes(6).toString('hex')}`;
    const data = randomBytes(size);
    for (let at = 0; at + marker.length <= size; at += Math.max(marker.length, size >> 3)) data.write(marker, at, 'latin1');
    return { marker, data: size < marker.length ? Buffer.from(marker) : data };
  });
}

async function put(store: JournalingBlobStore, data: Buffer): Promise<Oid> {
  const w = await store.journal.createWriter('acme/game', oidOf(data), { expectedSize: data.length });
  w.write(data);
  await w.finish();
  return oidOf(data);
}

async function readBack(store: JournalingBlobStore, oid: Oid): Promise<Buffer | null> {
  const r = await store.open(oid);
  if (r === null) return null;
  try {
    const whole = Buffer.alloc(r.size);
    await r.readAt(whole, 0);
    const chunk = r.read(1, r.size - 1);
    const ranged = await chunk.next();
    await chunk.close();
    if (ranged === null || !Buffer.from(ranged).equals(whole.subarray(1))) throw new Error('a range read differs from the whole');
    return whole;
  } finally {
    await r.close();
  }
}

/** The markers found in any file of the journal folder. */
function markersIn(dir: string, markers: string[]): string[] {
  const files = readdirSync(dir).map((n) => readFileSync(join(dir, n)));
  if (files.length === 0 || files.every((f) => f.length === 0)) throw new Error('no journal bytes to grep');
  return markers.filter((m) => files.some((f) => f.includes(m, 0, 'latin1')));
}


t.test('sealed: no plaintext in the journal, read back live, after replay and after retirement', async (t) => {
  const dir = tmpDir();
  const journalDir = join(dir, 'journal');
  const disk = await DiskBlobStore.open(dir);
  const objects = marked('sealed');
  let store = await JournalingBlobStore.open(disk, journalDir, refs, clock, { ring, seal: true });
  const oids: Oid[] = [];
  for (const o of objects) oids.push(await put(store, o.data));
  for (const [i, oid] of oids.entries()) {
    t.ok(store.holds(oid), `object ${i} is journaled (no file of its own)`);
    t.ok((await readBack(store, oid))?.equals(objects[i]!.data), `object ${i} reads back from its sealed record`);
  }
  t.same(markersIn(journalDir, objects.map((o) => o.marker)), [], 'no marker in any journal file');
  await store.close();

  // The same objects journaled plain are found by the same grep: it does look at the bytes.
  const plainDir = join(tmpDir(), 'journal');
  const plain = await JournalingBlobStore.open(disk, plainDir, refs, clock);
  for (const o of objects) await put(plain, o.data);
  await plain.close();
  t.same(markersIn(plainDir, objects.map((o) => o.marker)), objects.map((o) => o.marker), 'a plain journal holds every marker');

  store = await JournalingBlobStore.open(disk, journalDir, refs, clock, { ring, seal: true });
  t.teardown(() => store.close());
  t.match(await store.recover(), { replayed: objects.length }, 'every record replays');
  for (const [i, oid] of oids.entries()) t.ok((await readBack(store, oid))?.equals(objects[i]!.data), `object ${i} reads back after replay`);
  now += 1000;
  t.ok((await store.retire()) >= 1, 'the segment retires');
  for (const [i, oid] of oids.entries()) {
    t.notOk(store.holds(oid), `object ${i} left the journal`);
    t.ok(readFileSync(disk.pathOf(oid)).equals(objects[i]!.data), `object ${i} was written out whole`);
  }
});

t.test('a sealed record whose bytes changed is never served; replay stops there as at a torn record', async (t) => {
  const dir = tmpDir();
  const journalDir = join(dir, 'journal');
  const disk = await DiskBlobStore.open(dir);
  const segments = await SegmentLog.open(journalDir, clock, { ring, seal: true });
  const [a, b, c] = [randomBytes(5000), randomBytes(70_000), randomBytes(5000)];
  const at = [];
  for (const d of [a, b, c]) at.push((await segments.append({ repo: 'acme/game', oid: oidOf(d), size: d.length, data: d }))!);
  await segments.close();
  t.ok(at.every((l) => l.record !== undefined), 'every data record is sealed');
  flipByte(segments.pathOf(at[1]!.segment), at[1]!.offset + 1000);

  const store = await JournalingBlobStore.open(disk, journalDir, refs, clock, { ring, seal: true });
  t.teardown(() => store.close());
  await store.recover();
  t.ok((await readBack(store, oidOf(a)))?.equals(a), 'the record before it is served');
  t.notOk(store.holds(oidOf(b)), 'the changed record is not taken');
  t.equal(await store.open(oidOf(b)), null, 'and reads as absent');
  t.notOk(store.holds(oidOf(c)), 'nor any record after it (a torn tail)');

  // Changed while the store runs: the download fails, it never hands out the bytes. The store's
  // first append started a new segment (plain file: the record then its digest at the end).
  const d = randomBytes(20_000);
  const oid = await put(store, d);
  const last = readdirSync(journalDir).filter((n) => n.startsWith('seg-')).sort().at(-1)!;
  const path = join(journalDir, last);
  flipByte(path, readFileSync(path).length - 16 - 16 - 100); // in the ciphertext, before its tag and the record's digest
  await t.rejects(store.open(oid), { code: 'LFS_ERR_OBJECT_DAMAGED' }, 'opening it fails as a damaged object');
});

t.test('a start refuses a sealed segment whose key the ring lacks; with the key, encryption off, it replays', async (t) => {
  const dir = join(tmpDir(), 'journal');
  const sealing = await SegmentLog.open(dir, clock, { ring, seal: true });
  const data = randomBytes(3000);
  await sealing.append({ repo: 'acme/game', oid: oidOf(data), size: data.length, data });
  await sealing.close();

  const refused = async (keys: KeyRing | null): Promise<unknown> => SegmentLog.open(dir, clock, { ring: keys, seal: false }).then((j) => j.close(), (e: unknown) => e);
  const lacking = await refused(KeyRing.parse(k2));
  t.ok(lacking instanceof StartRefusedError, 'refused');
  t.match((lacking as Error).message, /journal segments are sealed under key k1 \(.*seg-0+1\.log\) and the key ring lacks it/, 'naming the key and the segment');
  t.notOk((lacking as Error).message.includes('\n'), 'one line');
  t.match((await refused(null) as Error).message, /sealed under key k1 .* and no encryption key is given/, 'no keys at all: refused too');

  const reading = await SegmentLog.open(dir, clock, { ring: KeyRing.parse(`${k2}\n${k1}`), seal: false });
  t.teardown(() => reading.close());
  const replayed: Oid[] = [];
  for (const s of reading.sealed) for await (const r of reading.records(s)) replayed.push(r.oid);
  t.same(replayed, [oidOf(data)], 'with the old key kept and encryption off, the sealed segment replays');
  const more = randomBytes(3000);
  const at = await reading.append({ repo: 'acme/game', oid: oidOf(more), size: more.length, data: more });
  t.equal(at!.record, undefined, 'new records are plain with encryption off');
});

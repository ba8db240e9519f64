import { createHash, randomBytes } from 'node:crypto';
import { closeSync, cpSync, existsSync, openSync, readSync, readdirSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { blake3 } from '@napi-rs/blake-hash';
import t from 'tap';
import { SegmentLog as Journal, type JournalLocation } from '../../../../src/store/journal/segment-log.js';
import { parseOid, type Oid } from '../../../../src/protocol/oid.js';
import { tmpDir } from '../../../helpers/start-server.js';

const oidOf = (data: Buffer): Oid => parseOid(createHash('sha256').update(data).digest('hex'))!;
const segmentsIn = (dir: string): string[] => readdirSync(dir).filter((n) => n.startsWith('seg-'));

async function readAt(journal: Journal, at: JournalLocation): Promise<Buffer> {
  const fh = await open(journal.pathOf(at.segment), 'r');
  try {
    const buf = Buffer.alloc(at.length);
    await fh.read(buf, 0, at.length, at.offset);
    return buf;
  } finally {
    await fh.close();
  }
}

// 80 MB of concurrent appends cross several 16 MiB segments, plain and prepared, while the spare is
// being written: every record must land once, in a segment that replay reads back whole.
t.test('concurrent appends across segment switches all replay, bytes intact', async (t) => {
  const dir = join(tmpDir(), 'journal');
  const journal = await Journal.open(dir);
  const objects = Array.from({ length: 320 }, (_, i) => randomBytes(100_000 + i * 997));
  const written = new Map<Oid, { data: Buffer; at: JournalLocation }>();
  const crashed = join(tmpDir(), 'journal');
  let writtenAtCrash = new Set<Oid>();
  for (let i = 0; i < objects.length; i += 16) {
    // Halfway, wait for the spare that the first half asked for, so the next wave goes into a
    // prepared segment whatever the disk's speed (a plain segment gives way as soon as one is ready).
    if (i === 160) await journal.spareReady();
    const wave = objects.slice(i, i + 16);
    const locations = await Promise.all(wave.map((data) => journal.append({ repo: 'acme/game', oid: oidOf(data), size: data.length, data })));
    wave.forEach((data, k) => written.set(oidOf(data), { data, at: locations[k]! }));
    if (i === 160) {
      // What a crash leaves: the files as they are now, the prepared current segment full length.
      cpSync(dir, crashed, { recursive: true });
      writtenAtCrash = new Set(written.keys());
    }
  }
  for (const { data, at } of [...written.values()].slice(0, 20)) t.ok((await readAt(journal, at)).equals(data), 'served from where append said');
  await journal.close();
  t.notOk(existsSync(join(dir, 'next.spare')), 'close removes the unused spare');
  t.ok(segmentsIn(dir).length >= 3, `several segments used (${segmentsIn(dir).length})`);
  for (const seg of segmentsIn(dir)) t.ok(statSync(join(dir, seg)).size <= 16 << 20, `${seg} within the segment size`);

  const again = await Journal.open(dir);
  t.teardown(() => again.close());
  const seen = new Map<Oid, number>();
  for (const segment of again.sealed) {
    for await (const r of again.records(segment)) {
      seen.set(r.oid, (seen.get(r.oid) ?? 0) + 1);
      const w = written.get(r.oid);
      t.ok(w !== undefined && r.location !== null && w.data.length === r.size, 'a record of an appended object');
      if (w !== undefined && r.location !== null) t.ok((await readAt(again, r.location)).equals(w.data), 'its bytes read back from the journal');
    }
  }
  t.equal(seen.size, written.size, 'every appended record replays');
  t.ok([...seen.values()].every((n) => n === 1), 'each exactly once');

  const afterCrash = await Journal.open(crashed);
  t.teardown(() => afterCrash.close());
  t.ok(segmentsIn(crashed).some((n) => statSync(join(crashed, n)).size === 16 << 20), 'the crash left a prepared segment untruncated');
  let replayed = 0;
  for (const segment of afterCrash.sealed) for await (const r of afterCrash.records(segment)) if (writtenAtCrash.has(r.oid) && written.get(r.oid)!.data.length === r.size) replayed++;
  t.equal(replayed, writtenAtCrash.size, 'replay after the crash finds every record and stops at the zeros');
});

// An upload that is alone has its flush run in line (no threadpool round trip); one that turns out
// not to be alone (others queued with it) is group-committed as usual. Both must be durable records.
t.test('appends flushed in line and group-committed ones replay alike', async (t) => {
  const dir = tmpDir();
  const journal = await Journal.open(dir);
  const alone = randomBytes(70_000);
  const at = await journal.append({ repo: 'acme/game', oid: oidOf(alone), size: alone.length, data: alone }, { alone: () => true });
  t.ok((await readAt(journal, at!)).equals(alone), 'a lone append reads back');
  const together = Array.from({ length: 6 }, () => randomBytes(50_000));
  const locations = await Promise.all(together.map((d, i) => journal.append({ repo: 'acme/game', oid: oidOf(d), size: d.length, data: d }, { alone: () => i === 0 })));
  for (const [i, d] of together.entries()) t.ok((await readAt(journal, locations[i]!)).equals(d), `append ${i} of a group reads back`);
  await journal.close();
  const again = await Journal.open(dir);
  const replayed: string[] = [];
  for (const segment of again.sealed) for await (const r of again.records(segment)) replayed.push(r.oid);
  t.same(replayed, [alone, ...together].map(oidOf), 'every record replays, in order');
});

// Uploads that are not alone are flushed in line only while every upload in flight is a small
// journaled one and recent flushes were quick (a new journal has no slow one yet): then one flush on
// the event loop takes the whole group. With a file upload in flight (its data on its way to the
// disk, which a flush of the device's cache would wait for) they go to the threadpool, however
// quick the disk.
t.test('concurrent appends: one flush in line while only small uploads are in flight, on the threadpool beside a file upload', async (t) => {
  const journal = await Journal.open(tmpDir());
  t.teardown(() => journal.close());
  const group = (hints: { alone: () => boolean; smallOnly: () => boolean }): Promise<unknown[]> =>
    Promise.all(Array.from({ length: 6 }, () => randomBytes(20_000)).map((d) => journal.append({ repo: 'acme/game', oid: oidOf(d), size: d.length, data: d }, hints)));
  await group({ alone: () => false, smallOnly: () => true });
  t.same(journal.flushStats, { inLine: 1, pooled: 0, records: 6, recycledSegments: 0, zeroedSegments: 0, plainSegments: 1 }, 'six small uploads: one flush, in line');
  await group({ alone: () => false, smallOnly: () => false });
  const { inLine, pooled, records } = journal.flushStats;
  t.equal(inLine, 1, 'none in line while a file upload is in flight');
  t.ok(pooled >= 1 && pooled <= 6, `flushed on the threadpool (${pooled} flushes)`);
  t.equal(records, 12);
});

// A lull prepares the next segment, so a sequential client's first objects after it append into
// written blocks (cheaper flushes) instead of growing a new file; a journal that took no append
// since start does not spend a segment of zeros on it.
t.test('an idle rotation has a spare prepared, and the next append goes into it', async (t) => {
  const dir = tmpDir();
  const journal = await Journal.open(dir);
  await journal.rotateIfIdle(0);
  t.notOk(await journal.spareReady(), 'no spare before the first append');
  t.notOk(existsSync(join(dir, 'next.spare')));
  const first = randomBytes(1000);
  await journal.append({ repo: 'acme/game', oid: oidOf(first), size: first.length, data: first });
  await journal.rotateIfIdle(0);
  t.same(journal.sealed.length, 1, 'the idle segment is sealed');
  t.ok(await journal.spareReady(), 'a spare is prepared in the lull');
  t.ok(existsSync(join(dir, 'next.spare')));
  const second = randomBytes(1000);
  const at = await journal.append({ repo: 'acme/game', oid: oidOf(second), size: second.length, data: second });
  t.notOk(existsSync(join(dir, 'next.spare')), 'the spare became the new segment');
  t.equal(statSync(journal.pathOf(at!.segment)).size, 16 << 20, 'the new segment is the prepared one, zeros after the record');
  t.ok((await readAt(journal, at!)).equals(second), 'the record reads back');
  await journal.close();
  t.equal(statSync(journal.pathOf(at!.segment)).size, 16 << 20, 'closed at full length, to be recycled whole');
  const again = await Journal.open(dir);
  const replayed: Oid[] = [];
  for await (const r of again.records(at!.segment)) replayed.push(r.oid);
  t.same(replayed, [oidOf(second)], 'replay stops at the zeros after the record');
});

// Records now carry a digest of their head only, the data being proven by the oid it hashes to;
// segments an earlier version wrote ("STJ1": BLAKE3 of the whole record) must still replay.
t.test('STJ1 records of an earlier version replay; data that does not hash to its oid ends replay', async (t) => {
  const dir = tmpDir();
  const repo = Buffer.from('acme/game');
  const v1 = (data: Buffer | null, oid: Oid, size: number): Buffer => {
    const length = 51 + repo.length + (data?.length ?? 0) + 16;
    const rec = Buffer.alloc(length);
    rec.writeUInt32LE(0x53544a31, 0);
    rec.writeUInt32LE(length, 4);
    rec.writeUInt8(data === null ? 1 : 2, 8);
    rec.writeUInt16LE(repo.length, 9);
    rec.write(oid, 11, 32, 'hex');
    rec.writeBigUInt64LE(BigInt(size), 43);
    repo.copy(rec, 51);
    data?.copy(rec, 51 + repo.length);
    blake3(rec.subarray(0, length - 16)).copy(rec, length - 16, 0, 16);
    return rec;
  };
  const [a, b] = [randomBytes(3000), randomBytes(5000)];
  writeFileSync(join(dir, 'seg-000000000001.log'), Buffer.concat([v1(a, oidOf(a), a.length), v1(null, oidOf(b), b.length)]));

  const journal = await Journal.open(dir);
  const old: { oid: Oid; size: number; data: boolean }[] = [];
  for await (const r of journal.records(1)) old.push({ oid: r.oid, size: r.size, data: r.location !== null });
  t.same(old, [{ oid: oidOf(a), size: 3000, data: true }, { oid: oidOf(b), size: 5000, data: false }], 'both STJ1 records replay');

  const [c, d, e] = [randomBytes(2000), randomBytes(2000), randomBytes(2000)];
  const at: JournalLocation[] = [];
  for (const x of [c, d, e]) at.push((await journal.append({ repo: 'acme/game', oid: oidOf(x), size: x.length, data: x }))!);
  await journal.close();
  const again = await Journal.open(dir);
  const whole: Oid[] = [];
  for await (const r of again.records(at[0]!.segment)) whole.push(r.oid);
  t.same(whole, [c, d, e].map(oidOf), 'new records replay whole');

  // One byte of d's data changed on disk: its head still checks out, its data no longer names it.
  const fd = openSync(again.pathOf(at[1]!.segment), 'r+');
  const flipped = Buffer.alloc(1);
  readSync(fd, flipped, 0, 1, at[1]!.offset + 7);
  flipped[0] ^= 0xff;
  writeSync(fd, flipped, 0, 1, at[1]!.offset + 7);
  closeSync(fd);
  const cut: Oid[] = [];
  for await (const r of again.records(at[0]!.segment)) cut.push(r.oid);
  t.same(cut, [oidOf(c)], 'replay stops at the record whose data does not hash to its oid');
  await again.close();
});

import { createHash, randomBytes } from 'node:crypto';
import { cpSync, existsSync, readFileSync, readSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { KeyRing } from '../../../../src/crypto/key-ring.js';
import { SegmentLog as Journal, type JournalLocation } from '../../../../src/store/journal/segment-log.js';
import { parseOid, type Oid } from '../../../../src/protocol/oid.js';
import { tmpDir } from '../../../helpers/start-server.js';

// A retired segment is written over as a later one instead of 16 MiB of fresh zeros. What must hold:
// replay of the later segment never returns the records the file held before (even where an old
// record starts exactly where the new ones end), numbers never repeat across a restart, and a
// segment someone still reads is never written over.

const oidOf = (data: Buffer): Oid => parseOid(createHash('sha256').update(data).digest('hex'))!;
const recycledIn = (dir: string): string[] => readdirSync(dir).filter((n) => n.startsWith('recycled-'));
const append = (journal: Journal, data: Buffer): Promise<JournalLocation | null> => journal.append({ repo: 'acme/game', oid: oidOf(data), size: data.length, data });

async function replayed(journal: Journal, segment: number): Promise<Oid[]> {
  const oids: Oid[] = [];
  for await (const r of journal.records(segment)) oids.push(r.oid);
  return oids;
}

/**
 * A journal whose current segment is a prepared one (only those are recycled): a first append opens
 * a plain segment, an idle rotation seals it and prepares a spare, and the next appends go there.
 */
async function preparedJournal(dir: string, keys?: { ring: KeyRing; seal: boolean }): Promise<{ journal: Journal; plain: number }> {
  const journal = await Journal.open(dir, Date.now, keys);
  const plain = (await append(journal, randomBytes(100)))!.segment;
  await journal.rotateIfIdle(0);
  if (!(await journal.spareReady())) throw new Error('no spare was prepared');
  return { journal, plain };
}

t.test('a retired segment is written over as a later one; replay returns only the new records', async (t) => {
  const dir = tmpDir();
  const { journal, plain } = await preparedJournal(dir);
  // Records of one size from one repository: the fourth old record starts exactly where three new
  // ones end, which replay would take for a fourth new one if digests did not cover the segment.
  const old = Array.from({ length: 6 }, () => randomBytes(2000));
  const oldAt = await Promise.all(old.map((d) => append(journal, d)));
  const first = oldAt[0]!.segment;
  t.not(first, plain, 'the old records went into the prepared segment');
  await journal.rotateIfIdle(0);
  const inode = statSync(journal.pathOf(first)).ino;
  await journal.remove(plain);
  await journal.remove(first);
  t.same(recycledIn(dir), [`recycled-${String(first).padStart(12, '0')}.spare`], 'the prepared segment is kept, the plain one deleted');
  await journal.close();

  // A restart in between: the recycled file is found, and the next number is above it.
  const again = await Journal.open(dir);
  t.equal(again.recycledSegments, 1, 'found at start');
  const fresh = Array.from({ length: 3 }, () => randomBytes(2000));
  const at: JournalLocation[] = [];
  for (const d of fresh) at.push((await append(again, d))!);
  const segment = at[0]!.segment;
  t.ok(segment > first, `a new number (${segment} after ${first})`);
  t.equal(statSync(again.pathOf(segment)).ino, inode, 'the recycled file became the new segment');
  t.same(recycledIn(dir), [], 'taken from the recycled files');
  t.same(
    at.map((a) => a.offset),
    oldAt.slice(0, 3).map((a) => a!.offset),
    'the new records lie exactly over the first three old ones: the fourth old one starts where they end',
  );

  // What a crash leaves (the file as it is now), and what a clean close leaves: the same three.
  const crashed = tmpDir();
  cpSync(dir, crashed, { recursive: true });
  t.same(await replayed(await Journal.open(crashed), segment), fresh.map(oidOf), 'after a crash: the new records only');
  await again.close();
  t.same(await replayed(await Journal.open(dir), segment), fresh.map(oidOf), 'after a close: the new records only');
});

t.test('a segment a reader holds open is deleted, not written over', async (t) => {
  const dir = tmpDir();
  const { journal } = await preparedJournal(dir);
  const data = randomBytes(5000);
  const at = (await append(journal, data))!;
  const reader = journal.openSegment(at.segment);
  await journal.rotateIfIdle(0);
  await journal.remove(at.segment);
  t.same(recycledIn(dir), [], 'not recycled while read');
  t.notOk(existsSync(journal.pathOf(at.segment)), 'deleted');
  const next = (await append(journal, randomBytes(5000)))!;
  t.not(next.segment, at.segment, 'appends go on elsewhere');
  const back = Buffer.alloc(at.length);
  t.equal(readSync(reader.fd, back, 0, at.length, at.offset), at.length);
  t.ok(back.equals(data), 'the reader still reads the bytes it opened');
  reader.close();
  reader.close(); // a second close is harmless
  await journal.close();
});

t.test('recycled files past the limit or not whole are removed at start; numbers stay above them', async (t) => {
  const dir = tmpDir();
  const name = (n: number): string => `recycled-${String(n).padStart(12, '0')}.spare`;
  for (let n = 1; n <= 10; n++) writeFileSync(join(dir, name(n)), Buffer.alloc(n === 3 ? 4096 : 16 << 20));
  const journal = await Journal.open(dir);
  t.equal(journal.recycledSegments, 8, 'eight kept');
  t.notOk(existsSync(join(dir, name(3))), 'a short one removed');
  const kept = recycledIn(dir).map((n) => Number(n.slice('recycled-'.length, -'.spare'.length)));
  t.equal(kept.length, 8);
  const at = (await append(journal, randomBytes(100)))!;
  t.ok(at.segment > Math.max(...kept), `numbered above the recycled files kept (${at.segment} > ${Math.max(...kept)})`);
  await journal.close();
});

// Sealed (encryption at rest): a record's nonce is its offset, so a recycled segment must never
// reuse its old key: it gets a fresh one, in a new key record over the old.
t.test('a recycled sealed segment gets a fresh key; replay returns only the new records', async (t) => {
  const dir = tmpDir();
  const keys = { ring: KeyRing.parse(`k1 ${randomBytes(32).toString('base64')}`), seal: true };
  const { journal, plain } = await preparedJournal(dir, keys);
  const old = Array.from({ length: 4 }, () => randomBytes(2000));
  const oldAt = [];
  for (const d of old) oldAt.push((await append(journal, d))!);
  const first = oldAt[0]!.segment;
  await journal.rotateIfIdle(0);
  const before = readFileSync(journal.pathOf(first)).subarray(0, oldAt[0]!.record!);
  await journal.remove(plain);
  await journal.remove(first);
  t.equal(recycledIn(dir).length, 1, 'the sealed prepared segment is kept for reuse');
  await journal.close();

  const again = await Journal.open(dir, Date.now, keys);
  const fresh = Array.from({ length: 2 }, () => randomBytes(2000));
  const at: JournalLocation[] = [];
  for (const d of fresh) at.push((await append(again, d))!);
  t.same(at.map((a) => a.record), oldAt.slice(0, 2).map((a) => a.record), 'the new records lie at the old ones\' offsets (their nonces)');
  const after = readFileSync(again.pathOf(at[0]!.segment)).subarray(0, at[0]!.record!);
  t.equal(after.length, before.length, 'a key record of the same length');
  t.notOk(after.equals(before), 'but another key: written over the old key record');
  await again.close();
  const reopened = await Journal.open(dir, Date.now, keys);
  t.teardown(() => reopened.close());
  t.same(await replayed(reopened, at[0]!.segment), fresh.map(oidOf), 'replay returns the new records only');
});

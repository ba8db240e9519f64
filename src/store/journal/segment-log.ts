import { hash } from 'node:crypto';
import { closeSync, fdatasyncSync, openSync, statfsSync, type StatsFs } from 'node:fs';
import { blake3 } from '../../format/native-codecs.js';
import { mkdir, open, readdir, rename, stat, statfs, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { JournalFlushes } from '../../metrics/registry.js';
import { parseOid, type Oid } from '../../protocol/oid.js';
import { smallBuffers } from '../buffer-pool.js';
import { DirSyncer } from '../dir-sync.js';
import { writeFullyAt, writeFullySync } from '../../util/write-fully.js';
import { mapIoError } from '../staging-file.js';
import type { KeyRing } from '../../crypto/key-ring.js';
import { StartRefusedError } from '../../errors/start-refused.js';
import { plainReads } from '../inline-reader.js';
import { newSegmentKey, openRecordData, SEAL_TAG, sealRecordData, unwrapSegmentKey } from './segment-seal.js';

/**
 * The store's write-ahead journal, group-committed (records written while one fdatasync runs share
 * the next). Replay restores any reference the index lost, so SQLite can run synchronous=NORMAL.
 *
 * Segments are prepared ahead (zeros) or recycled, so fdatasync skips the file-system journal commit
 * a growing file needs; replay stops at the zeros. A recycled segment keeps old records behind new
 * ones, so each digest covers the segment's number, and numbers only grow.
 *
 * Record: magic u32 | length u32 | kind u8 | repo length u16 | oid 32 | size u64 | repo | data |
 * digest (16 bytes). "STJ3": sha256 of the head and the segment's number; the data must hash to its
 * oid, so no pass over it. Replay also reads "STJ2" and "STJ1" records (never recycled).
 *
 * Sealed (encryption at rest, segment-seal.ts): a segment's first record holds its data key, wrapped
 * ("STJ4", kind key: the kek id as repo, the wrapped key as data, the digest over all of it and the
 * number), and data records are "STJ4" with the data sealed (ciphertext, then the tag), the digest
 * as STJ3's. A record that does not open ends replay as a torn one does.
 *
 * A record is acknowledged only once every record before it in its segment is flushed: a failed
 * write or flush tears the segment there and appends go on in a fresh one.
 */
export interface JournalRecord {
  readonly repo: string;
  readonly oid: Oid;
  readonly size: number;
  readonly data: Uint8Array | null;
}

export interface JournalLocation {
  readonly segment: number;
  /** Where the object's bytes start (sealed: its ciphertext). */
  readonly offset: number;
  /** The object's size. */
  readonly length: number;
  /** A sealed record's own offset (its nonce; its head up to `offset` is authenticated); absent when the bytes are plain. */
  readonly record?: number;
}

export interface ReplayedRecord {
  readonly repo: string;
  readonly oid: Oid;
  readonly size: number;
  readonly location: JournalLocation | null;
}

const MAGIC = 0x53544a33; // "STJ3": digest of the head and the segment's number; the data proven by its oid
const MAGIC_V2 = 0x53544a32; // "STJ2": digest of the head alone (read, no longer written)
const MAGIC_V1 = 0x53544a31; // "STJ1": BLAKE3 of the whole record (read, no longer written)
const MAGIC_SEALED = 0x53544a34; // "STJ4": a segment's key, or data sealed under it
/** A record's digest: sha256 of its head, for STJ3 then its segment's number (u64 LE); DIGEST bytes kept. */
const headDigest = (head: Buffer): Buffer => hash('sha256', head, 'buffer');
const HEADER = 4 + 4 + 1 + 2 + 32 + 8;
const NUMBER = 8;
const DIGEST = 16;
const KIND_REF = 1;
const KIND_DATA = 2;
/** A sealed segment's first record: its data key, wrapped. */
const KIND_KEY = 3;
/** A key record is no longer than this (a kek id of at most 64 bytes and a wrapped key). */
const KEY_RECORD_MAX = 512;
const SEGMENT_MAX = 16 << 20;
/** The prepared next segment; it holds no records, so a leftover one is removed at start. */
const SPARE_NAME = 'next.spare';
const SPARE_RETRY_MS = 10_000;
const ZEROS = Buffer.alloc(1 << 20);
/** Free space below which no spare is prepared nor a retired segment kept. */
const SPARE_HEADROOM = 4 * SEGMENT_MAX;
/** Retired segments kept for reuse; a longer burst goes on in zeroed spares. */
const RECYCLED_MAX = 8;
const RECYCLED_NAME = /^recycled-(\d{12})\.spare$/;
const SEGMENT_NAME = /^seg-(\d{12})\.log$/;
const INLINE_WRITE_MAX = 256 << 10;

interface Segment {
  readonly no: number;
  readonly path: string;
  readonly fh: FileHandle;
  tail: number;
  /** Where its first record after the key record starts (0 when not sealed): nothing before is an append. */
  base: number;
  /** Its blocks were written in full before its first record: a zeroed spare, or a recycled segment. */
  readonly prepared: boolean;
  /** Settles once every write started in this segment has; rejects if any failed. */
  written: Promise<void>;
  /** Offset of the first record whose write or flush failed: nothing at or after it is acknowledged. */
  tornAt: number | null;
  readonly unsettled: Set<number>;
}

export interface FlushHints {
  readonly alone?: () => boolean;
  /** Whether every upload in flight is a small journaled one: no other file's data is on its way to the disk. */
  readonly smallOnly?: () => boolean;
}

interface PendingAppend {
  readonly segment: Segment;
  readonly offset: number;
  readonly hints: FlushHints;
  readonly written: Promise<void>;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

/**
 * Group commits in flight at once: the next fdatasync starts while a finished batch is answered. It
 * covers only writes completed before it started, so every record is durable before it is acknowledged.
 */
const MAX_FLUSHES = 2;

/** A flush may run in line (on the event loop) while recent flushes averaged less than this. */
const IN_LINE_FLUSH_MAX_MS = 1;
const FLUSH_AVERAGE_WEIGHT = 0.25;

export class SegmentLog {
  readonly #dir: string;
  readonly #dirs = new DirSyncer();
  #current: Segment | null = null;
  #nextNo: number;
  #queue: PendingAppend[] = [];
  #flushes = 0;
  get #flushing(): boolean {
    return this.#flushes > 0;
  }
  #lastAppend = 0;
  readonly #sealed: number[] = [];
  #spare: FileHandle | null = null;
  #preparing: Promise<void> | null = null;
  #spareFailedAt = -Infinity;
  #switching: Promise<void> | null = null;
  #stats = { inLine: 0, pooled: 0, records: 0, recycledSegments: 0, zeroedSegments: 0, plainSegments: 0 };
  readonly #recycled: number[];
  /** Sealed segments that may be recycled: prepared in this run (so written in full, STJ3 only) and never torn. */
  readonly #recyclable = new Set<number>();
  readonly #readers = new Map<number, number>();
  #flushMs = 0;
  /** Seals new segments' data with keys it wraps; null: records are written plain. */
  readonly #sealWith: KeyRing | null;
  /** The data keys of sealed segments (written in this run or unwrapped at open), each with the key-encryption key that wraps it. */
  readonly #keys: Map<number, SegmentKeyOf>;

  readonly #now: () => number;

  private constructor(dir: string, nextNo: number, existing: number[], recycled: number[], now: () => number, sealWith: KeyRing | null, keys: Map<number, SegmentKeyOf>) {
    this.#dir = dir;
    this.#now = now;
    this.#sealWith = sealWith;
    this.#keys = keys;
    this.#nextNo = nextNo;
    this.#sealed.push(...existing);
    this.#recycled = recycled;
  }

  /**
   * `keys`: the ring that unwraps sealed segments' keys; `seal`: new records' data are sealed under
   * it. Refuses the start (StartRefusedError) when a segment is sealed under a key the ring lacks.
   */
  static async open(dir: string, now: () => number = Date.now, keys: { ring: KeyRing | null; seal: boolean } = { ring: null, seal: false }): Promise<SegmentLog> {
    await mkdir(dir, { recursive: true });
    await unlink(join(dir, SPARE_NAME)).catch(() => undefined);
    const names = await readdir(dir);
    const numbered = (pattern: RegExp): number[] =>
      names
        .map((n) => pattern.exec(n))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => Number(m[1]))
        .sort((a, b) => a - b);
    const existing = numbered(SEGMENT_NAME);
    const recycled: number[] = [];
    for (const no of numbered(RECYCLED_NAME)) {
      const path = join(dir, recycledName(no));
      const whole = await stat(path).then((s) => s.size === SEGMENT_MAX, () => false);
      if (whole && recycled.length < RECYCLED_MAX) recycled.push(no);
      else await unlink(path).catch(() => undefined);
    }
    // Above every number in use, recycled files included, so no old record passes for a new one.
    const highest = Math.max(0, ...existing, ...recycled);
    const unwrapped = await unwrapSegmentKeys(dir, existing, keys.ring);
    return new SegmentLog(dir, highest + 1, existing, recycled, now, keys.seal ? keys.ring : null, unwrapped);
  }

  pathOf(segment: number): string {
    return segmentPath(this.#dir, segment);
  }

  get recycledSegments(): number {
    return this.#recycled.length;
  }

  async spareReady(): Promise<boolean> {
    await this.#preparing;
    return this.#spare !== null;
  }

  get sealed(): readonly number[] {
    return this.#sealed;
  }

  /** Appends a record and resolves once it is durable (data records with where the bytes are). */
  async append(rec: JournalRecord, hints: FlushHints = {}): Promise<JournalLocation | null> {
    const repo = Buffer.from(rec.repo, 'utf8');
    const dataLen = rec.data?.byteLength ?? 0;
    const sealed = rec.data !== null && this.#sealWith !== null;
    const length = HEADER + repo.length + dataLen + (sealed ? SEAL_TAG : 0) + DIGEST;
    const buf = smallBuffers.take(length);
    buf.writeUInt32LE(sealed ? MAGIC_SEALED : MAGIC, 0);
    buf.writeUInt32LE(length, 4);
    buf.writeUInt8(rec.data ? KIND_DATA : KIND_REF, 8);
    buf.writeUInt16LE(repo.length, 9);
    buf.write(rec.oid, 11, 32, 'hex');
    buf.writeBigUInt64LE(BigInt(rec.size), 43);
    repo.copy(buf, HEADER);

    let seg = this.#roomFor(length);
    while (seg === null) {
      try {
        await this.#makeRoom();
      } catch (e) {
        smallBuffers.give(buf);
        throw mapIoError(e);
      }
      seg = this.#roomFor(length);
    }
    // From finding room to queueing the flush nothing awaits, so no seal can come in between. The
    // segment's number goes where the data starts, for the digest only (written over afterwards).
    const head = HEADER + repo.length;
    buf.writeBigUInt64LE(BigInt(seg.no), head);
    const signed = buf.subarray(0, head + NUMBER);
    const digest = headDigest(signed);
    const offset = seg.tail;
    if (sealed) {
      // The head and number are the AAD, copied: the ciphertext goes over the number.
      sealRecordData(this.#keys.get(seg.no)!.key, offset, Buffer.from(signed), rec.data!, buf.subarray(head, head + dataLen + SEAL_TAG));
    } else if (dataLen > 0) {
      // fill() is one native memcpy; set() from shared memory takes V8's slow element-wise path.
      buf.fill(rec.data!, head, head + dataLen);
    }
    digest.copy(buf, length - DIGEST, 0, DIGEST);
    seg.tail += length;
    this.#lastAppend = this.#now();
    // A small record is written in line rather than paying a threadpool round trip.
    let own: Promise<void>;
    if (length <= INLINE_WRITE_MAX) {
      try {
        writeFullySync(seg.fh.fd, buf, offset);
        own = Promise.resolve();
      } catch (e) {
        tear(seg, offset); // at once: the next append must already go elsewhere
        own = Promise.reject(e);
      }
      smallBuffers.give(buf);
    } else {
      own = writeFullyAt(seg.fh, buf, offset)
        .catch((e: unknown) => {
          tear(seg, offset);
          throw e;
        })
        .finally(() => smallBuffers.give(buf));
    }
    // Written means this record and every one before it: replay would stop at a failed earlier one.
    // It waits for its own write even then, so a segment's last `written` means no write in flight
    // (truncation at seal relies on it).
    const written = Promise.allSettled([seg.written, own]).then(([before, mine]) => {
      if (before.status === 'rejected') throw before.reason;
      if (mine.status === 'rejected') throw mine.reason;
    });
    seg.written = written;
    written.catch(() => undefined);
    seg.unsettled.add(offset);
    await new Promise<void>((resolve, reject) => {
      this.#queue.push({ segment: seg, offset, written, resolve, reject, hints });
      if (this.#flushes < MAX_FLUSHES) void this.#flush();
    });
    if (rec.data === null) return null;
    const at = { segment: seg.no, offset: offset + head, length: dataLen };
    return sealed ? { ...at, record: offset } : at;
  }

  /**
   * Group commit: one fdatasync covers every append whose write finished before it started. It runs
   * in line (no threadpool wake-ups) when the upload is alone, or all in flight are small journaled
   * ones and recent flushes were quick, after one turn of the loop so queued requests join; otherwise
   * on the threadpool, so bodies are read while the disk works.
   */
  async #flush(): Promise<void> {
    this.#flushes++;
    while (this.#queue.length > 0) {
      if (this.#runsInLine(this.#queue)) await afterNextPoll();
      const batch = this.#queue.splice(0);
      if (batch.length === 0) break; // the other flush took them during that turn
      // Each record settles on its own: a failed one must not take down the good ones.
      const results = await Promise.allSettled(batch.map((b) => b.written));
      const inLine = this.#runsInLine(batch); // asked again: others may have come during the turn
      const started = performance.now();
      for (const seg of new Set(batch.map((b) => b.segment))) {
        try {
          if (inLine) fdatasyncSync(seg.fh.fd);
          else await seg.fh.datasync();
        } catch (e) {
          // After a failed flush the kernel may have dropped the dirty pages and report the next
          // flush clean, or report it to the other flush in flight: every unacknowledged record of
          // the segment is torn.
          tear(seg, Math.min(...seg.unsettled));
          batch.forEach((b, i) => {
            if (b.segment === seg && results[i]!.status === 'fulfilled') results[i] = { status: 'rejected', reason: e };
          });
        }
      }
      this.#flushMs += FLUSH_AVERAGE_WEIGHT * (performance.now() - started - this.#flushMs);
      if (inLine) this.#stats.inLine++;
      else this.#stats.pooled++;
      batch.forEach((b, i) => {
        b.segment.unsettled.delete(b.offset);
        const r = results[i]!;
        const torn = b.segment.tornAt !== null && b.offset >= b.segment.tornAt;
        if (r.status === 'fulfilled' && !torn) {
          this.#stats.records++;
          b.resolve();
        } else {
          b.reject(mapIoError(r.status === 'rejected' ? r.reason : storageFull()));
        }
      });
    }
    this.#flushes--;
  }

  #runsInLine(pending: readonly PendingAppend[]): boolean {
    const hints = pending[0]!.hints;
    return (pending.length === 1 && hints.alone?.() === true) || (this.#flushMs < IN_LINE_FLUSH_MAX_MS && hints.smallOnly?.() === true);
  }

  #roomFor(length: number): Segment | null {
    const cur = this.#current;
    if (this.#switching !== null || cur === null || cur.tornAt !== null) return null;
    // A plain segment (made while no spare was ready) gives way as soon as a prepared one is.
    const preparedReady = this.#spare !== null || this.#recycled.length > 0;
    if (cur.tail > cur.base && (cur.tail + length > SEGMENT_MAX || (!cur.prepared && preparedReady))) return null;
    // A burst that has filled half a segment gets the next one prepared now.
    if (cur.tail >= SEGMENT_MAX / 2) this.#prepareSpare();
    return cur;
  }

  async #makeRoom(): Promise<void> {
    if (this.#switching !== null) {
      await this.#switching.catch(() => undefined);
      return;
    }
    this.#switching = this.#switchSegment(this.#current !== null).finally(() => {
      this.#switching = null;
    });
    await this.#switching;
  }

  async #switchSegment(sealCurrent: boolean): Promise<void> {
    if (sealCurrent) await this.#seal();
    const no = this.#nextNo++;
    const path = this.pathOf(no);
    const reuse = this.#recycled.pop();
    const spare = reuse === undefined ? this.#spare : null;
    if (spare !== null) this.#spare = null;
    let seg: Segment;
    if (reuse !== undefined) {
      // Its old records carry another segment's number (see the class comment).
      let fh: FileHandle;
      try {
        await rename(join(this.#dir, recycledName(reuse)), path);
        fh = await open(path, 'r+');
      } catch (e) {
        await unlink(path).catch(() => undefined);
        throw e;
      }
      seg = { no, path, fh, tail: 0, base: 0, prepared: true, written: Promise.resolve(), tornAt: null, unsettled: new Set() };
      this.#stats.recycledSegments++;
    } else if (spare !== null) {
      try {
        await rename(join(this.#dir, SPARE_NAME), path);
      } catch (e) {
        await spare.close().catch(() => undefined);
        throw e;
      }
      seg = { no, path, fh: spare, tail: 0, base: 0, prepared: true, written: Promise.resolve(), tornAt: null, unsettled: new Set() };
      this.#stats.zeroedSegments++;
    } else {
      seg = { no, path, fh: await open(path, 'wx'), tail: 0, base: 0, prepared: false, written: Promise.resolve(), tornAt: null, unsettled: new Set() };
      this.#stats.plainSegments++;
    }
    try {
      if (this.#sealWith !== null) this.#writeKeyRecord(seg, this.#sealWith);
      await this.#dirs.sync(this.#dir); // the segment's name must survive a crash too
    } catch (e) {
      await seg.fh.close().catch(() => undefined);
      await unlink(path).catch(() => undefined);
      throw e;
    }
    this.#current = seg;
  }

  /** A fresh data key for the segment, in its first record (over a recycled segment's old one): flushed with its first append. */
  #writeKeyRecord(seg: Segment, ring: KeyRing): void {
    const { key, kekId, wrapped } = newSegmentKey(ring, seg.no);
    const record = keyRecord(seg.no, kekId, wrapped);
    writeFullySync(seg.fh.fd, record, 0);
    seg.tail = seg.base = record.length;
    this.#keys.set(seg.no, { key, kekId });
  }

  #prepareSpare(): void {
    if (this.#recycled.length > 0 || this.#spare !== null || this.#preparing !== null || Date.now() - this.#spareFailedAt < SPARE_RETRY_MS) return;
    this.#preparing = (async () => {
      // On a nearly full disk the zeros would take room uploads need: segments grow as records arrive.
      if (!(await this.#hasRoom())) throw new Error('no room for a spare segment');
      const fh = await open(join(this.#dir, SPARE_NAME), 'w');
      try {
        for (let at = 0; at < SEGMENT_MAX; at += ZEROS.length) await writeFullyAt(fh, ZEROS, at);
        await fh.datasync();
      } catch (e) {
        await fh.close().catch(() => undefined);
        await unlink(join(this.#dir, SPARE_NAME)).catch(() => undefined);
        throw e;
      }
      this.#spare = fh;
    })()
      .catch(() => {
        this.#spareFailedAt = Date.now(); // a full disk: appends go on into plain segments
      })
      .finally(() => {
        this.#preparing = null;
      });
  }

  get flushStats(): JournalFlushes {
    return { ...this.#stats };
  }

  idleFor(ms: number): boolean {
    return this.#now() - this.#lastAppend >= ms;
  }

  /** The key-encryption keys the sealed segments on disk are wrapped with: a key file must keep them. */
  kekIdsInUse(): string[] {
    return [...new Set([...this.#keys.values()].map((k) => k.kekId))].sort();
  }

  /** Closes the segment being written now, whether idle or not (rewrap's forced retirement). */
  async rotateNow(): Promise<void> {
    if (this.#current !== null && this.#current.tail > this.#current.base) await this.#seal();
  }

  /** Closes an idle segment and prepares a spare, so the next upload starts in written blocks. */
  async rotateIfIdle(idleMs: number): Promise<void> {
    if (!this.idleFor(idleMs)) return;
    if (this.#current !== null && this.#current.tail > this.#current.base && !this.#flushing) await this.#seal();
    if (this.#lastAppend > 0 && this.#current === null && this.#recyclable.size === 0) this.#prepareSpare();
  }

  async #seal(): Promise<void> {
    const seg = this.#current!;
    this.#current = null;
    while (this.#flushing) await new Promise((r) => setTimeout(r, 1));
    await this.#closeSegment(seg);
    this.#sealed.push(seg.no);
  }

  /**
   * A torn segment is cut back to its last good record; never throws (replay stops at the torn record
   * anyway). A prepared one keeps its length, to be recycled whole. No write to it is in flight.
   */
  async #closeSegment(seg: Segment): Promise<void> {
    await seg.written.catch(() => undefined);
    if (seg.tornAt !== null) await seg.fh.truncate(seg.tornAt).catch(() => undefined);
    else if (seg.prepared) this.#recyclable.add(seg.no);
    await seg.fh.close().catch(() => undefined);
  }

  /**
   * Reads back every valid record of a sealed segment, in order. It never searches past a bad record:
   * an object's data inside a torn record could hold bytes that pass for a record.
   */
  async *records(segment: number): AsyncGenerator<ReplayedRecord> {
    const fh = await open(this.pathOf(segment), 'r');
    try {
      const { size } = await fh.stat();
      const number = segmentNumber(segment);
      let key: Buffer | null = null;
      let at = 0;
      const head = Buffer.alloc(HEADER);
      while (at + HEADER + DIGEST <= size) {
        await fh.read(head, 0, HEADER, at);
        const length = head.readUInt32LE(4);
        const magic = head.readUInt32LE(0);
        if ((magic !== MAGIC && magic !== MAGIC_V2 && magic !== MAGIC_V1 && magic !== MAGIC_SEALED) || length < HEADER + DIGEST || at + length > size) break;
        const whole = Buffer.alloc(length);
        await fh.read(whole, 0, length, at);
        const kind = whole.readUInt8(8);
        const repoLen = whole.readUInt16LE(9);
        if (HEADER + repoLen + DIGEST > length) break;
        const digest = whole.subarray(length - DIGEST);
        const data = whole.subarray(HEADER + repoLen, length - DIGEST);
        const oid = parseOid(whole.toString('hex', 11, 43));
        if (oid === null || (kind !== KIND_REF && kind !== KIND_DATA && kind !== KIND_KEY)) break;
        if (magic === MAGIC_SEALED || kind === KIND_KEY) {
          if (magic !== MAGIC_SEALED) break;
          if (kind === KIND_KEY) {
            // Only first, and only with its key unwrapped at open.
            if (at !== 0 || parseKeyRecord(whole, segment) === null || (key = this.#keys.get(segment)?.key ?? null) === null) break;
            at += length;
            continue;
          }
          if (kind !== KIND_DATA || key === null || data.byteLength < SEAL_TAG) break;
          const signed = Buffer.concat([whole.subarray(0, HEADER + repoLen), number]);
          if (!headDigest(signed).subarray(0, DIGEST).equals(digest)) break;
          if (!openRecordData(key, at, signed, data, Buffer.alloc(data.byteLength - SEAL_TAG))) break;
          const dataAt = at + HEADER + repoLen;
          yield {
            repo: whole.toString('utf8', HEADER, HEADER + repoLen),
            oid,
            size: Number(whole.readBigUInt64LE(43)),
            location: { segment, offset: dataAt, length: data.byteLength - SEAL_TAG, record: at },
          };
          at += length;
          continue;
        }
        if (magic === MAGIC_V1) {
          if (!blake3(whole.subarray(0, length - DIGEST)).subarray(0, DIGEST).equals(digest)) break;
        } else {
          const head = whole.subarray(0, HEADER + repoLen);
          const signed = magic === MAGIC_V2 ? head : Buffer.concat([head, number]);
          if (!headDigest(signed).subarray(0, DIGEST).equals(digest)) break;
          if (kind === KIND_REF ? data.byteLength !== 0 : hash('sha256', data, 'hex') !== oid) break;
        }
        const repo = whole.toString('utf8', HEADER, HEADER + repoLen);
        const dataLen = data.byteLength;
        yield {
          repo,
          oid,
          size: Number(whole.readBigUInt64LE(43)),
          location: kind === KIND_DATA ? { segment, offset: at + HEADER + repoLen, length: dataLen } : null,
        };
        at += length;
      }
    } finally {
      await fh.close();
    }
  }

  /**
   * Reads the bytes a record holds at `at` from `fd` (the segment's, open for reading) into `into`
   * (`at.length` bytes). False, `into` zeroed, when a sealed record does not authenticate.
   */
  async readData(fd: number, at: JournalLocation, into: Buffer): Promise<boolean> {
    if (at.record === undefined) {
      await plainReads(fd, at.length, at.offset).readAt(into, 0); // in line when small (inline-reader.ts)
      return true;
    }
    const key = this.#keys.get(at.segment)?.key;
    const headLength = at.offset - at.record;
    const span = headLength + at.length + SEAL_TAG;
    const whole = smallBuffers.take(span);
    try {
      await plainReads(fd, span, at.record).readAt(whole, 0);
      const aad = Buffer.concat([whole.subarray(0, headLength), segmentNumber(at.segment)]);
      if (key !== undefined && openRecordData(key, at.record, aad, whole.subarray(headLength), into)) return true;
      into.fill(0);
      return false;
    } finally {
      smallBuffers.give(whole);
    }
  }

  /** Opens a segment to read journaled bytes; such a segment is deleted, never recycled. Throws ENOENT once it is gone. */
  openSegment(segment: number): { fd: number; close: () => void } {
    const fd = openSync(this.pathOf(segment), 'r');
    this.#readers.set(segment, (this.#readers.get(segment) ?? 0) + 1);
    let isOpen = true;
    return {
      fd,
      close: () => {
        if (!isOpen) return;
        isOpen = false;
        const n = this.#readers.get(segment)! - 1;
        if (n === 0) this.#readers.delete(segment);
        else this.#readers.set(segment, n);
        closeSync(fd);
      },
    };
  }

  /**
   * Removes a sealed segment whose records are all safe elsewhere: recycled when prepared in this run,
   * unread (openSegment), fewer than RECYCLED_MAX wait and the file system has room; else deleted.
   */
  async remove(segment: number): Promise<void> {
    const i = this.#sealed.indexOf(segment);
    if (i >= 0) this.#sealed.splice(i, 1);
    const path = this.pathOf(segment);
    let kept = false;
    // No reader comes any more; one still open must keep reading what it opened.
    if (this.#recyclable.delete(segment) && this.#recycled.length < RECYCLED_MAX && (await this.#hasRoom()) && !this.#readers.has(segment)) {
      kept = await rename(path, join(this.#dir, recycledName(segment))).then(() => true, () => false);
    }
    if (kept) this.#recycled.push(segment);
    else await unlink(path).catch(() => undefined);
    this.#keys.delete(segment);
    await this.#dirs.sync(this.#dir);
  }

  /** Whether SPARE_HEADROOM is free now (one `statfs`): then an index beside the journal has room to commit too. */
  hasRoomNow(): boolean {
    let fs: StatsFs | null = null;
    try {
      fs = statfsSync(this.#dir);
    } catch {
    }
    return hasHeadroom(fs);
  }

  async #hasRoom(): Promise<boolean> {
    return hasHeadroom(await statfs(this.#dir).catch(() => null));
  }

  async close(): Promise<void> {
    while (this.#switching !== null) await this.#switching.catch(() => undefined);
    while (this.#flushing) await new Promise((r) => setTimeout(r, 1));
    await this.#preparing;
    if (this.#spare !== null) {
      await this.#spare.close().catch(() => undefined);
      this.#spare = null;
      await unlink(join(this.#dir, SPARE_NAME)).catch(() => undefined);
    }
    if (this.#current !== null) {
      await this.#closeSegment(this.#current);
      this.#sealed.push(this.#current.no);
      this.#current = null;
    }
  }
}

const segmentPath = (dir: string, segment: number): string => join(dir, `seg-${String(segment).padStart(12, '0')}.log`);

/** A sealed segment's first record: its data key wrapped under `kekId` (the repo field), the digest over all of it and the segment's number. */
function keyRecord(segment: number, kekId: string, wrapped: Buffer): Buffer {
  const id = Buffer.from(kekId, 'utf8');
  const length = HEADER + id.length + wrapped.length + DIGEST;
  const buf = Buffer.alloc(length); // oid and size stay zero
  buf.writeUInt32LE(MAGIC_SEALED, 0);
  buf.writeUInt32LE(length, 4);
  buf.writeUInt8(KIND_KEY, 8);
  buf.writeUInt16LE(id.length, 9);
  id.copy(buf, HEADER);
  wrapped.copy(buf, HEADER + id.length);
  keyRecordDigest(buf, segment).copy(buf, length - DIGEST, 0, DIGEST);
  return buf;
}

function keyRecordDigest(record: Buffer, segment: number): Buffer {
  return headDigest(Buffer.concat([record.subarray(0, record.length - DIGEST), segmentNumber(segment)]));
}

/** The kek id and wrapped key of a whole key record of `segment`; null when it is not one, or damaged. */
function parseKeyRecord(record: Buffer, segment: number): { kekId: string; wrapped: Buffer } | null {
  if (record.length < HEADER + DIGEST || record.length > KEY_RECORD_MAX) return null;
  if (record.readUInt32LE(0) !== MAGIC_SEALED || record.readUInt32LE(4) !== record.length || record.readUInt8(8) !== KIND_KEY) return null;
  const idLength = record.readUInt16LE(9);
  if (HEADER + idLength + DIGEST > record.length) return null;
  if (!keyRecordDigest(record, segment).subarray(0, DIGEST).equals(record.subarray(record.length - DIGEST))) return null;
  return { kekId: record.toString('utf8', HEADER, HEADER + idLength), wrapped: Buffer.from(record.subarray(HEADER + idLength, record.length - DIGEST)) };
}

/** The key record a segment starts with, or null when it starts with another record (not sealed) or a damaged one. */
async function readKeyRecord(path: string, segment: number): Promise<{ kekId: string; wrapped: Buffer } | null> {
  const fh = await open(path, 'r');
  try {
    const first = Buffer.alloc(KEY_RECORD_MAX);
    const { bytesRead } = await fh.read(first, 0, KEY_RECORD_MAX, 0);
    if (bytesRead < HEADER || first.readUInt32LE(0) !== MAGIC_SEALED || first.readUInt8(8) !== KIND_KEY) return null;
    const length = first.readUInt32LE(4);
    return length > bytesRead ? null : parseKeyRecord(first.subarray(0, length), segment);
  } finally {
    await fh.close();
  }
}

/**
 * The data keys of the sealed segments among `segments`. Refuses the start, one line naming the key
 * ids, when a segment is sealed under a key `ring` lacks (or no ring is given): its acknowledged
 * objects could not be read, and writing on would hide that. A key that does not unwrap (a damaged
 * record) is left out: replay stops at that segment's start, as at a torn record.
 */
interface SegmentKeyOf {
  readonly key: Buffer;
  readonly kekId: string;
}

async function unwrapSegmentKeys(dir: string, segments: readonly number[], ring: KeyRing | null): Promise<Map<number, SegmentKeyOf>> {
  const keys = new Map<number, SegmentKeyOf>();
  const missing = new Map<string, string>();
  for (const segment of segments) {
    const path = segmentPath(dir, segment);
    const found = await readKeyRecord(path, segment);
    if (found === null) continue;
    if (ring === null || !ring.has(found.kekId)) {
      if (!missing.has(found.kekId)) missing.set(found.kekId, path);
      continue;
    }
    const key = unwrapSegmentKey(ring, found.kekId, segment, found.wrapped);
    if (key !== null) keys.set(segment, { key, kekId: found.kekId });
  }
  if (missing.size > 0) {
    const where = ring === null ? 'no encryption key is given (SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND)' : 'the key ring lacks it';
    const named = [...missing].map(([id, path]) => `${id} (${path})`).join(', ');
    throw new StartRefusedError(`encryption keys: journal segments are sealed under key ${named} and ${where}`);
  }
  return keys;
}

const recycledName = (segment: number): string => `recycled-${String(segment).padStart(12, '0')}.spare`;

function segmentNumber(segment: number): Buffer {
  const b = Buffer.alloc(NUMBER);
  b.writeBigUInt64LE(BigInt(segment));
  return b;
}

/** Marks a segment torn at `offset`: no record from there on is acknowledged or appended to. */
function tear(seg: Segment, offset: number): void {
  if (seg.tornAt === null || offset < seg.tornAt) seg.tornAt = offset;
}

/** The refusal of a record behind a torn one: its own write went through, an earlier one's did not. */
function storageFull(): NodeJS.ErrnoException {
  return Object.assign(new Error('ENOSPC: an earlier record of this journal segment could not be written'), { code: 'ENOSPC' });
}

/** Resolves after the event loop has polled its sockets once more (an immediate set in the check phase runs only after the next poll). */
function afterNextPoll(): Promise<void> {
  return new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
}

/** SPARE_HEADROOM free on a file system (as `statfs` gave it; null: unknown, so no). */
function hasHeadroom(fs: StatsFs | null): boolean {
  return fs !== null && fs.bavail * fs.bsize >= SPARE_HEADROOM;
}

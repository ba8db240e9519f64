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

/**
 * The store's write-ahead journal: what makes an acknowledged upload durable cheaply.
 *
 * Every acknowledged upload appends one record (repository, oid, size) before it is acknowledged;
 * a small object's record also carries its bytes. Appends are group-committed: all records written
 * while one fdatasync runs share the next one, so eight parallel uploads pay one flush, and a
 * sequential small upload pays one append-and-flush (≈0.3 ms here) instead of creating and syncing
 * a file and its directory (≈2.5 ms). The SQLite index can then run with synchronous=NORMAL: after
 * a power loss, replaying the journal restores any reference the index lost. Small objects are
 * served from the journal until the store has written them to their own files in the background;
 * a segment is deleted once its objects have files and the index has been checkpointed.
 *
 * Segments are prepared ahead: in a lull (once the journal has taken appends) and during bursts once
 * a segment is half full, the next one is written full of zeros and synced in the background
 * (`next.spare`), then renamed into place when the current one fills or the next burst starts.
 * Appending into blocks that are already allocated and written lets each group commit's fdatasync
 * skip the file-system journal commit that growing a file needs (measured here: 0.13–0.19 ms instead
 * of 0.25–0.32 ms per flush). Replay stops at the zeros after the last record, as it does at a torn
 * tail.
 *
 * Retired segments are recycled rather than deleted (up to RECYCLED_MAX of them, while the file
 * system has room): renamed `recycled-<no>.spare`, then renamed into place as a later segment and
 * written over. Their blocks are allocated and written as a spare's are, without another 16 MiB of
 * zeros: a small object was written three times (zeros, its record, its own file), now twice. Old
 * records stay behind the new ones, so each record's digest covers its segment's number: replay of
 * segment N stops at the first record written for another segment, as at a torn one. Segment
 * numbers only grow, also across restarts (the next is above every segment and recycled file), so
 * no old record can pass for a new one. A segment that a download still reads (openSegment) is
 * deleted instead: its bytes must not change under that reader.
 *
 * Record: magic u32 | length u32 | kind u8 | repo length u16 | oid 32 | size u64 | repo | data |
 * digest (16 bytes). "STJ3" records: the digest is the first 16 bytes of sha256(everything before
 * the data, then the segment's number as u64), and a data record's data must hash to its oid, which
 * it does because only verified bytes reach the journal: so appending costs no pass over the data (a
 * BLAKE3 of 64 KiB was 14 µs on the event loop per small upload), and replay proves the data with the
 * hash that names it. Written before: "STJ2" records (the digest of the head alone) and "STJ1"
 * (BLAKE3-128 of everything before the digest); replay reads all three. Segments of an earlier run
 * are never recycled, so STJ1/STJ2 records are only ever found in the files that wrote them. A torn
 * tail (crash mid-append) fails its digest or its data's hash and ends replay of that segment.
 *
 * Because replay ends a segment at its first bad record, a record is acknowledged only once every
 * record before it in its segment is written and flushed: a failed write or flush (a full disk)
 * tears the segment at that record, every record after it in that segment is refused too, the
 * segment takes no more appends and is truncated back to its last good record when it is sealed,
 * and appends go on in a fresh segment. So no acknowledged record can ever sit behind a torn one.
 */
export interface JournalRecord {
  readonly repo: string;
  readonly oid: Oid;
  readonly size: number;
  /** The object's bytes, for a small object stored in the journal; null for a reference only. */
  readonly data: Uint8Array | null;
}

/** Where a journaled object's bytes are. */
export interface JournalLocation {
  readonly segment: number;
  /** File offset of the first data byte. */
  readonly offset: number;
  readonly length: number;
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
/**
 * A record's digest: sha256 of its head (fields and repository name), for STJ3 followed by its
 * segment's number (u64 LE, NUMBER bytes); the first DIGEST bytes used.
 */
const headDigest = (head: Buffer): Buffer => hash('sha256', head, 'buffer');
const HEADER = 4 + 4 + 1 + 2 + 32 + 8;
const NUMBER = 8;
const DIGEST = 16;
const KIND_REF = 1;
const KIND_DATA = 2;
/** A segment is closed for appends past this size, and after a short idle spell (see rotateIfIdle). */
const SEGMENT_MAX = 16 << 20;
/** The prepared next segment; it holds no records, so a leftover one is simply removed at start. */
const SPARE_NAME = 'next.spare';
/** After a failed preparation (a full disk), segments are created plainly for this long. */
const SPARE_RETRY_MS = 10_000;
const ZEROS = Buffer.alloc(1 << 20);
/** Free space below which no spare is prepared (see #prepareSpare), nor a retired segment kept: a few segments' worth. */
const SPARE_HEADROOM = 4 * SEGMENT_MAX;
/**
 * Retired segments kept for reuse (128 MiB of disk): the 1,000 × 64 KiB objects of a burst fill four;
 * a longer burst goes on in zeroed spares as before.
 */
const RECYCLED_MAX = 8;
const RECYCLED_NAME = /^recycled-(\d{12})\.spare$/;
const SEGMENT_NAME = /^seg-(\d{12})\.log$/;
/** Records up to this size are written synchronously on the calling thread. */
const INLINE_WRITE_MAX = 256 << 10;

interface Segment {
  readonly no: number;
  readonly path: string;
  readonly fh: FileHandle;
  tail: number;
  /** Its blocks were written in full before its first record: a zeroed spare, or a recycled segment. */
  readonly prepared: boolean;
  /** Settles once every write started in this segment has; rejects if any of them failed. */
  written: Promise<void>;
  /** Offset of the first record whose write or flush failed: nothing at or after it is acknowledged. */
  tornAt: number | null;
  /** Offsets of its records queued or being flushed, not yet acknowledged or refused. */
  readonly unsettled: Set<number>;
}

/** What the caller knows of the uploads in flight, asked when a flush is due (see #flush). */
export interface FlushHints {
  /** Whether the caller's upload is the only one in flight. */
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
 * Group commits in flight at once. With one, records that arrive during a flush wait for it to end
 * before theirs can start, and the disk idles while the finished batch's responses are sent; with
 * two, the next batch's fdatasync starts at once (it covers only writes that completed before it
 * started, so every record is still durable before it is acknowledged). Measured with 8 parallel
 * uploaders of 64 KiB objects (lean clients, 2,000 per burst, alternating builds): 3,400 → 3,565
 * objects/s on average, for 2.2 times as many fdatasyncs (2.4 records each instead of 5.5).
 */
const MAX_FLUSHES = 2;

/**
 * A flush may hold the event loop (run in line) while recent flushes took less than this, on
 * average. Flushes here take 0.3–0.5 ms; with 2 ms as the bound the same figures were measured
 * (8 curl processes, 5 rounds each), so the lower one, which holds other requests less on a slower disk.
 */
const IN_LINE_FLUSH_MAX_MS = 1;
/** Weight of the newest flush in that average. */
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
  /** Segments no longer appended to, oldest first. */
  readonly #sealed: number[] = [];
  /** The prepared spare, once ready; its preparation while it runs. */
  #spare: FileHandle | null = null;
  #preparing: Promise<void> | null = null;
  #spareFailedAt = -Infinity;
  #switching: Promise<void> | null = null;
  #stats = { inLine: 0, pooled: 0, records: 0, recycledSegments: 0, zeroedSegments: 0, plainSegments: 0 };
  /** Numbers of the recycled files ready for reuse (`recycled-<no>.spare`). */
  readonly #recycled: number[];
  /** Sealed segments that may be recycled: prepared in this run (so written in full, STJ3 only) and never torn. */
  readonly #recyclable = new Set<number>();
  /** Open readers per segment (openSegment). */
  readonly #readers = new Map<number, number>();
  /** Recent flushes' duration, a moving average (see IN_LINE_FLUSH_MAX_MS). */
  #flushMs = 0;

  /** The clock lulls are measured on (ms); Date.now unless a test moves it. */
  readonly #now: () => number;

  private constructor(dir: string, nextNo: number, existing: number[], recycled: number[], now: () => number) {
    this.#dir = dir;
    this.#now = now;
    this.#nextNo = nextNo;
    this.#sealed.push(...existing);
    this.#recycled = recycled;
  }

  static async open(dir: string, now: () => number = Date.now): Promise<SegmentLog> {
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
    // Above every number in use, recycled files included: each holds records of its own number and
    // lower ones, which must never pass for records of a new segment.
    const highest = Math.max(0, ...existing, ...recycled);
    return new SegmentLog(dir, highest + 1, existing, recycled, now);
  }

  pathOf(segment: number): string {
    return join(this.#dir, `seg-${String(segment).padStart(12, '0')}.log`);
  }

  /** Retired segments kept for reuse, ready now. */
  get recycledSegments(): number {
    return this.#recycled.length;
  }

  /** Resolves once a spare being prepared is ready (or its preparation failed): whether one is. */
  async spareReady(): Promise<boolean> {
    await this.#preparing;
    return this.#spare !== null;
  }

  /** Segments that receive no more appends, oldest first (all of them right after open). */
  get sealed(): readonly number[] {
    return this.#sealed;
  }

  /**
   * Appends a record and resolves once it is durable; data records resolve with where the bytes are.
   * `hints` say what the caller knows of the uploads in flight, asked when its flush is due (see #flush).
   */
  async append(rec: JournalRecord, hints: FlushHints = {}): Promise<JournalLocation | null> {
    const repo = Buffer.from(rec.repo, 'utf8');
    const dataLen = rec.data?.byteLength ?? 0;
    const length = HEADER + repo.length + dataLen + DIGEST;
    const buf = smallBuffers.take(length);
    buf.writeUInt32LE(MAGIC, 0);
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
    // From finding room to queueing the flush nothing awaits, so no seal can come in between.
    // The segment's number goes where the data starts, for the digest only (DIGEST ≥ NUMBER bytes
    // follow the head in any record, and the data and digest are written over it).
    const head = HEADER + repo.length;
    buf.writeBigUInt64LE(BigInt(seg.no), head);
    const digest = headDigest(buf.subarray(0, head + NUMBER));
    // fill() is one native memcpy; set() from the verify layer's shared blocks takes V8's slow
    // element-wise path (measured: 32 µs per 64 KiB instead of under 2).
    if (dataLen > 0) buf.fill(rec.data!, head, head + dataLen);
    digest.copy(buf, length - DIGEST, 0, DIGEST);
    const offset = seg.tail;
    seg.tail += length;
    this.#lastAppend = this.#now();
    // A small record is written in line (tens of µs) rather than through the threadpool, which
    // would cost a round trip of its own; the flush that follows is what takes time.
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
    // Written means this record and every one before it in the segment: replay would stop at a
    // failed earlier one. It waits for this record's own write even then, so that when a segment's
    // last `written` settles no write to it is in flight (its truncation at seal relies on it).
    const written = Promise.allSettled([seg.written, own]).then(([before, mine]) => {
      if (before.status === 'rejected') throw before.reason;
      if (mine.status === 'rejected') throw mine.reason;
    });
    seg.written = written;
    // Its failure is reported through the flush; this keeps it from counting as unhandled meanwhile.
    written.catch(() => undefined);
    seg.unsettled.add(offset);
    await new Promise<void>((resolve, reject) => {
      this.#queue.push({ segment: seg, offset, written, resolve, reject, hints });
      if (this.#flushes < MAX_FLUSHES) void this.#flush();
    });
    return rec.data ? { segment: seg.no, offset: offset + HEADER + repo.length, length: dataLen } : null;
  }

  /**
   * Group commit: one fdatasync covers every append whose write finished before it started; up to
   * MAX_FLUSHES of these loops run at once, each taking whatever is queued when it turns.
   *
   * A flush runs in line (on the event loop) when that is cheap: through the threadpool the same
   * fdatasync costs a thread wake-up and an event-loop wake-up (cross-CPU interrupts in this VM, and
   * the resolution of a promise per flush): 0.54 vs 0.33 ms measured from JavaScript for a lone
   * upload, the whole of a sequential client's wait, and with 8 curl processes uploading 64 KiB
   * objects, 0.52 vs 0.46 ms of server CPU per object and 1,776 vs 1,979 objects/s (docs/performance.md).
   * In line means either
   * - the upload is alone: the store has no other upload in flight and, after one turn of the event
   *   loop that reads whatever requests are already waiting in the sockets, no other record has
   *   joined the queue; or
   * - every upload in flight is a small journaled one (no other file's data on its way to the disk,
   *   which a flush of the device's cache would wait for) and recent flushes were quick
   *   (IN_LINE_FLUSH_MAX_MS): after one turn of the event loop, the batch is what has queued.
   * The turn matters: without it an upload is handled from its request to its flush without reading
   * the sockets again, so parallel uploaders would each be flushed one by one (measured: 8 parallel
   * uploaders lost a quarter of their rate). Otherwise (a large upload in flight, a slow disk) the
   * flush goes to the threadpool, so bodies are read and hashed while the disk works, and one slow
   * flush holds the event loop at most once before the average sends the next ones there.
   */
  async #flush(): Promise<void> {
    this.#flushes++;
    while (this.#queue.length > 0) {
      if (this.#runsInLine(this.#queue)) await afterNextPoll();
      const batch = this.#queue.splice(0);
      if (batch.length === 0) break; // the other flush took them during that turn
      // Each record settles on its own: a failed one (and those behind it in its segment) must not
      // take down the records of the batch that are good.
      const results = await Promise.allSettled(batch.map((b) => b.written));
      const inLine = this.#runsInLine(batch); // asked again: others may have come during the turn
      const started = performance.now();
      for (const seg of new Set(batch.map((b) => b.segment))) {
        try {
          if (inLine) fdatasyncSync(seg.fh.fd);
          else await seg.fh.datasync();
        } catch (e) {
          // After a failed flush the kernel may have dropped the dirty pages and report the next
          // flush clean; with two flushes in flight, the error may even come to the one whose pages
          // were fine. So every record of the segment not yet acknowledged is torn.
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

  /** Whether the flush of these queued records runs in line (see #flush): a lone upload's, or a quick one beside small uploads only. */
  #runsInLine(pending: readonly PendingAppend[]): boolean {
    const hints = pending[0]!.hints;
    return (pending.length === 1 && hints.alone?.() === true) || (this.#flushMs < IN_LINE_FLUSH_MAX_MS && hints.smallOnly?.() === true);
  }

  /** The current segment if `length` more bytes go into it now; null when a switch is needed first. */
  #roomFor(length: number): Segment | null {
    const cur = this.#current;
    if (this.#switching !== null || cur === null || cur.tornAt !== null) return null;
    // A plain segment (made while no spare was ready) gives way as soon as a prepared one is.
    const preparedReady = this.#spare !== null || this.#recycled.length > 0;
    if (cur.tail > 0 && (cur.tail + length > SEGMENT_MAX || (!cur.prepared && preparedReady))) return null;
    // A burst that has filled half a segment gets the next one prepared now (the lull's spare, if
    // any, is already in use).
    if (cur.tail >= SEGMENT_MAX / 2) this.#prepareSpare();
    return cur;
  }

  /** Switches to the next segment, or waits for the switch another append started. */
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
      // Its old records stay behind the new ones: they carry another segment's number (see the class comment).
      let fh: FileHandle;
      try {
        await rename(join(this.#dir, recycledName(reuse)), path);
        fh = await open(path, 'r+');
      } catch (e) {
        await unlink(path).catch(() => undefined);
        throw e;
      }
      seg = { no, path, fh, tail: 0, prepared: true, written: Promise.resolve(), tornAt: null, unsettled: new Set() };
      this.#stats.recycledSegments++;
    } else if (spare !== null) {
      try {
        await rename(join(this.#dir, SPARE_NAME), path);
      } catch (e) {
        await spare.close().catch(() => undefined);
        throw e;
      }
      seg = { no, path, fh: spare, tail: 0, prepared: true, written: Promise.resolve(), tornAt: null, unsettled: new Set() };
      this.#stats.zeroedSegments++;
    } else {
      seg = { no, path, fh: await open(path, 'wx'), tail: 0, prepared: false, written: Promise.resolve(), tornAt: null, unsettled: new Set() };
      this.#stats.plainSegments++;
    }
    try {
      await this.#dirs.sync(this.#dir); // the segment's name must survive a crash too
    } catch (e) {
      await seg.fh.close().catch(() => undefined);
      await unlink(path).catch(() => undefined);
      throw e;
    }
    this.#current = seg;
  }

  /** Starts writing the next segment's zeros in the background, unless a spare or a recycled segment exists or is coming. */
  #prepareSpare(): void {
    if (this.#recycled.length > 0 || this.#spare !== null || this.#preparing !== null || Date.now() - this.#spareFailedAt < SPARE_RETRY_MS) return;
    this.#preparing = (async () => {
      // On a nearly full disk the spare's zeros would take the room that uploads need (and fail
      // anyway): segments are then created plainly, and grow only as records arrive.
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

  /** Group-commit figures since start, for /metrics. */
  get flushStats(): JournalFlushes {
    return { ...this.#stats };
  }

  /** Whether nothing was appended for `ms`. */
  idleFor(ms: number): boolean {
    return this.#now() - this.#lastAppend >= ms;
  }

  /**
   * Closes the current segment for appends once nothing was appended for `idleMs`, and has a spare
   * prepared meanwhile, so the next upload (a sequential client's first object included) starts in
   * written blocks. Only a journal that has taken appends since start pays for a spare.
   */
  async rotateIfIdle(idleMs: number): Promise<void> {
    if (!this.idleFor(idleMs)) return;
    if (this.#current !== null && this.#current.tail > 0 && !this.#flushing) await this.#seal();
    // Sealed segments that retirement will recycle serve the next burst as well as zeros would.
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
   * A torn segment is cut back to its last good record, so its failed and refused records are gone
   * from disk too. Never throws: if the cut fails, replay still stops at the torn record, and nothing
   * after it was acknowledged. A prepared one keeps its length (replay stops after its last record)
   * so that it can be recycled whole. The caller has waited for the flushes, so no write to it is in flight.
   */
  async #closeSegment(seg: Segment): Promise<void> {
    await seg.written.catch(() => undefined);
    if (seg.tornAt !== null) await seg.fh.truncate(seg.tornAt).catch(() => undefined);
    else if (seg.prepared) this.#recyclable.add(seg.no);
    await seg.fh.close().catch(() => undefined);
  }

  /**
   * Reads back every valid record of a sealed segment, in order; a torn tail ends the segment. It
   * never searches past a bad record for a later good one: an object's data inside a torn record
   * could hold bytes that pass for a record (another repository's reference, say).
   */
  async *records(segment: number): AsyncGenerator<ReplayedRecord> {
    const fh = await open(this.pathOf(segment), 'r');
    try {
      const { size } = await fh.stat();
      const number = segmentNumber(segment);
      let at = 0;
      const head = Buffer.alloc(HEADER);
      while (at + HEADER + DIGEST <= size) {
        await fh.read(head, 0, HEADER, at);
        const length = head.readUInt32LE(4);
        const magic = head.readUInt32LE(0);
        if ((magic !== MAGIC && magic !== MAGIC_V2 && magic !== MAGIC_V1) || length < HEADER + DIGEST || at + length > size) break;
        const whole = Buffer.alloc(length);
        await fh.read(whole, 0, length, at);
        const kind = whole.readUInt8(8);
        const repoLen = whole.readUInt16LE(9);
        if (HEADER + repoLen + DIGEST > length) break;
        const digest = whole.subarray(length - DIGEST);
        const data = whole.subarray(HEADER + repoLen, length - DIGEST);
        const oid = parseOid(whole.toString('hex', 11, 43));
        if (oid === null || (kind !== KIND_REF && kind !== KIND_DATA)) break;
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
   * Opens a segment to read journaled bytes, on the calling thread (a few µs). The descriptor keeps
   * the bytes it reads until `close`, even if the segment retires meanwhile: a segment with a reader
   * open is deleted, never recycled (written over). Throws ENOENT once the segment is gone.
   */
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
   * Removes a sealed segment whose records are all safe elsewhere: recycled when it was prepared in
   * this run, no reader has it open (openSegment), fewer than RECYCLED_MAX wait and the file system
   * has room; deleted otherwise.
   */
  async remove(segment: number): Promise<void> {
    const i = this.#sealed.indexOf(segment);
    if (i >= 0) this.#sealed.splice(i, 1);
    const path = this.pathOf(segment);
    let kept = false;
    // The caller no longer serves its bytes from here, so no reader comes any more; one still open
    // must keep reading what it opened.
    if (this.#recyclable.delete(segment) && this.#recycled.length < RECYCLED_MAX && (await this.#hasRoom()) && !this.#readers.has(segment)) {
      kept = await rename(path, join(this.#dir, recycledName(segment))).then(() => true, () => false);
    }
    if (kept) this.#recycled.push(segment);
    else await unlink(path).catch(() => undefined);
    await this.#dirs.sync(this.#dir);
  }

  /**
   * Whether the file system has SPARE_HEADROOM free now (one `statfs`, about 2 µs): then an index
   * beside the journal has room for its next commits too (see JournaledPut.keepReference).
   */
  hasRoomNow(): boolean {
    let fs: StatsFs | null = null;
    try {
      fs = statfsSync(this.#dir);
    } catch {
      // unknown: no room
    }
    return hasHeadroom(fs);
  }

  /** Whether the file system has SPARE_HEADROOM free: room for a spare, or to keep a retired segment. */
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

const recycledName = (segment: number): string => `recycled-${String(segment).padStart(12, '0')}.spare`;

/** A segment's number as STJ3 digests cover it. */
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

/**
 * Resolves after the event loop has polled its sockets once more. An immediate set during the poll
 * phase runs in the check phase right after it, before any new poll; the second one runs only after
 * the next poll.
 */
function afterNextPoll(): Promise<void> {
  return new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
}

/** SPARE_HEADROOM free on a file system (as `statfs` gave it; null: unknown, so no). */
function hasHeadroom(fs: StatsFs | null): boolean {
  return fs !== null && fs.bavail * fs.bsize >= SPARE_HEADROOM;
}

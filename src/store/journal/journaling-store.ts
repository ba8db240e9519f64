import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { storageFault } from '../../errors/storage-fault.js';
import type { KeyRing } from '../../crypto/key-ring.js';
import { lfsError } from '../../errors/errors.js';
import type { JournalFlushes } from '../../metrics/registry.js';
import type { Oid } from '../../protocol/oid.js';
import { smallBuffers } from '../buffer-pool.js';
import { SegmentLog, type JournalLocation } from './segment-log.js';
import { plainReads } from '../inline-reader.js';
import type { BlobReader, BlobStat, BlobStore, ChunkSource, JournaledPut, JournaledWriter, ObjectWriter, PutResult, StoredObject, UploadJournal, WriterOptions } from '../types.js';
import { WholeObjectWriter } from '../whole-object-writer.js';
import { ForwardingBlobStore } from '../layers/forwarding.js';

/** Objects up to this size, with a known size, go to the journal instead of a file of their own. */
export const SMALL_OBJECT_MAX = 1 << 20;
/** A journal with nothing appended for this long is retired (see retire). */
const RETIRE_IDLE_MS = 1000;
/** Sealed journal segments (16 MiB each) that are retired even while uploads go on. */
const RETIRE_BACKLOG = 16;
/** Objects written to their own files at once while retiring (libuv's pool has 4 threads). */
const RETIRE_LANES = 4;

/**
 * The journal layer's port to the index (the index implements it): the journal holds every
 * acknowledged upload's reference until the index is durable on its own, and reports what it learns.
 */
export interface ReferenceLog {
  /** Start-up replay: restores a reference the index may have lost. Throws a storage fault when the index is full. */
  restore(repo: string, oid: Oid, size: number): Promise<void>;
  /** Whether any repository still references the oid: a journaled object nobody wants is not written out. */
  isWanted(oid: Oid): Promise<boolean>;
  /** A journaled object was written to the store below and takes `storedSize` there (compressed): asked only when that is not the object's size. */
  stored(oid: Oid, storedSize: number): Promise<void>;
  /** Makes the index durable on its own, before journal segments holding its references go. */
  checkpoint(): Promise<void>;
}

/**
 * The journal layer: the node-local write-ahead log of acknowledged uploads (segment-log.ts). An
 * upload through `journal` appends (repository, oid, size) before `finish` resolves, so the reference
 * survives a crash before the index commits it; a small object's bytes go in its record (one group
 * commit instead of create, fsync, rename, dir fsync) and are written below later, in a lull.
 *
 * Inside verify (only verified bytes are journaled), outside compress. Its durability is the local
 * disk's: used with the disk backend only.
 */
export class JournalingBlobStore extends ForwardingBlobStore {
  readonly #segments: SegmentLog;
  readonly #refs: ReferenceLog;
  /** Small objects whose bytes are still only in the journal. */
  readonly #journaled = new Map<Oid, JournalLocation>();
  /** Oids with bytes in each journal segment, to write their files before the segment goes. */
  readonly #segmentOids = new Map<number, Set<Oid>>();
  /**
   * References the index could not take: at start-up replay (a full disk), or after their upload was
   * acknowledged (JournaledPut.keepReference). No segment retires until they are in.
   */
  #deferred: { repo: string; oid: Oid; size: number }[] = [];
  /** Uploads between createWriter and their finish or abort. */
  #uploads = 0;
  /** Those of them written to a file of their own (not journaled whole): their data is on its way to the disk. */
  #fileUploads = 0;
  /** Small objects whose bytes are being appended (see #journalSmall). */
  readonly #appending = new Map<Oid, Promise<unknown>>();
  /** Largest object whose bytes go into the journal; 0: references only (see open). */
  readonly #bytesMax: number;

  private constructor(inner: BlobStore, segments: SegmentLog, refs: ReferenceLog, bytesMax: number) {
    super(inner);
    this.#segments = segments;
    this.#refs = refs;
    this.#bytesMax = bytesMax;
  }

  /**
   * `encryption`: for a store whose objects must not sit in the clear on disk (`seal`: encryption at
   * rest), small objects' bytes are journaled sealed under keys the ring wraps (segment-seal.ts);
   * without a ring the journal keeps references only. Sealed segments replay whenever the ring holds
   * their keys: the open refuses the start otherwise (see SegmentLog.open).
   */
  static async open(
    inner: BlobStore,
    dir: string,
    refs: ReferenceLog,
    now: () => number = Date.now,
    encryption: { ring: KeyRing | null; seal: boolean } = { ring: null, seal: false },
  ): Promise<JournalingBlobStore> {
    const referencesOnly = encryption.seal && encryption.ring === null;
    return new JournalingBlobStore(inner, await SegmentLog.open(dir, now, encryption), refs, referencesOnly ? 0 : SMALL_OBJECT_MAX);
  }

  /** Whether the upload asking is the only one in flight, so its journal flush may run in line (see SegmentLog). */
  readonly #alone = (): boolean => this.#uploads === 1;
  /** Whether no upload in flight writes a file of its own, so a flush waits on small records only (see SegmentLog). */
  readonly #smallOnly = (): boolean => this.#fileUploads === 0;
  readonly #flushHints = { alone: this.#alone, smallOnly: this.#smallOnly };

  readonly #uploadJournal: UploadJournal = { createWriter: (repo, oid, options) => this.#createWriter(repo, oid, options) };

  override get journal(): UploadJournal {
    return this.#uploadJournal;
  }

  override createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    // A maintenance rewrite of stored bytes: no new reference to record.
    if (options.replace === true) return this.inner.createWriter(oid, options);
    return this.#createWriter(null, oid, options);
  }

  /** `repo`: the upload's repository, whose reference is journaled; null for bytes alone. */
  async #createWriter(repo: string | null, oid: Oid, options: WriterOptions): Promise<JournaledWriter> {
    if (options.replace === true) return unjournaled(await this.inner.createWriter(oid, options));
    const size = options.expectedSize;
    const small = size !== null && size <= this.#bytesMax && this.#bytesMax > 0;
    this.#uploads++;
    if (!small) this.#fileUploads++;
    let counted = true;
    const done = (): void => {
      if (counted) {
        this.#uploads--;
        if (!small) this.#fileUploads--;
      }
      counted = false;
    };
    try {
      const w = small ? new WholeObjectWriter(size, (data) => this.#journalSmall(repo, oid, data)) : await this.#fileWriter(repo, oid, options);
      return { write: (c, r) => w.write(c, r), onDrain: (l) => w.onDrain(l), finish: () => w.finish().finally(done), abort: () => w.abort().finally(done) };
    } catch (e) {
      done();
      throw e;
    }
  }

  /** A larger object goes to the store below; an upload's reference is journaled before the client hears "stored". */
  async #fileWriter(repo: string | null, oid: Oid, options: WriterOptions): Promise<JournaledWriter> {
    const inner = await this.inner.createWriter(oid, options);
    if (repo === null) return unjournaled(inner);
    return {
      write: (c, r) => inner.write(c, r),
      onDrain: (l) => inner.onDrain(l),
      finish: async () => {
        const r = await inner.finish();
        await this.#segments.append({ repo, oid, size: r.size, data: null }, this.#flushHints);
        return { ...r, keepReference: this.#keeper(repo, oid, r.size) };
      },
      abort: () => inner.abort(),
    };
  }

  /** A concurrent write of the same oid waits for the first append and, if it succeeded, records only the reference. */
  async #journalSmall(repo: string | null, oid: Oid, data: Uint8Array): Promise<JournaledPut> {
    for (let first = this.#appending.get(oid); first !== undefined; first = this.#appending.get(oid)) await first.catch(() => undefined);
    // No existence check below (a round trip on the hot path): if the object is stored already, the
    // retirement finds it and skips it.
    if (this.#journaled.has(oid)) {
      if (repo !== null) await this.#segments.append({ repo, oid, size: data.byteLength, data: null }, this.#flushHints);
      return { size: data.byteLength, storedSize: data.byteLength, created: false, keepReference: this.#keeper(repo, oid, data.byteLength) };
    }
    // Bytes alone are recorded under no repository: replay restores no reference from them.
    const appended = this.#segments.append({ repo: repo ?? '', oid, size: data.byteLength, data: Buffer.from(data.buffer, data.byteOffset, data.byteLength) }, this.#flushHints);
    this.#appending.set(oid, appended);
    try {
      this.#remember(oid, (await appended)!);
    } finally {
      this.#appending.delete(oid);
    }
    return { size: data.byteLength, storedSize: data.byteLength, created: true, keepReference: this.#keeper(repo, oid, data.byteLength) };
  }

  /** Offered only while the disk has room, so the index's commit after the answer cannot meet a full disk. */
  #keeper(repo: string | null, oid: Oid, size: number): (() => void) | null {
    if (repo === null || !this.#segments.hasRoomNow()) return null;
    return () => {
      this.#deferred.push({ repo, oid, size });
    };
  }

  #remember(oid: Oid, location: JournalLocation): void {
    this.#journaled.set(oid, location);
    let set = this.#segmentOids.get(location.segment);
    if (set === undefined) this.#segmentOids.set(location.segment, (set = new Set()));
    set.add(oid);
  }

  holds(oid: Oid): boolean {
    return this.#journaled.has(oid);
  }

  /**
   * Start-up replay: a reference is never restored to bytes that are gone. One the index refuses (a
   * full disk) is deferred, and retire restores it before any segment may go.
   */
  async recover(): Promise<{ replayed: number; deferred: number }> {
    let n = 0;
    for (const segment of [...this.#segments.sealed]) {
      for await (const r of this.#segments.records(segment)) {
        const below = (await this.inner.stat(r.oid)) !== null;
        if (r.location !== null && !below) this.#remember(r.oid, r.location);
        if (!this.#journaled.has(r.oid) && !below) continue;
        if (r.repo === '') continue; // bytes alone: no reference to restore
        n++;
        try {
          await this.#refs.restore(r.repo, r.oid, r.size);
        } catch (e) {
          if (storageFault(e) === null) throw e;
          this.#deferred.push({ repo: r.repo, oid: r.oid, size: r.size });
        }
      }
    }
    return { replayed: n, deferred: this.#deferred.length };
  }

  /** References the index has not taken yet (see recover and #keeper). */
  get deferredReferences(): number {
    return this.#deferred.length;
  }

  /** Restores the references replay deferred; throws (a storage fault) while the index still refuses one. */
  async #restoreDeferred(): Promise<void> {
    while (this.#deferred.length > 0) {
      const r = this.#deferred[0]!;
      await this.#refs.restore(r.repo, r.oid, r.size);
      this.#deferred.shift();
    }
  }

  /** What the running retirement is doing (for the warning of one that does not finish; see retirement.ts). */
  retireStep = 'idle';
  /** The last retirement round: the scheduler's and rewrap's never run at once. */
  #round: Promise<unknown> = Promise.resolve();

  /**
   * Writes the wanted objects of sealed segments below, checkpoints the index, then deletes the
   * segments; safe to interrupt. It waits for a lull (each object's fsyncs compete with the uploads'
   * group commits) and stops when a burst starts, unless RETIRE_BACKLOG segments are sealed.
   */
  retire(): Promise<number> {
    return this.#oneRoundAtATime(() => this.#retireRound(false));
  }

  /** The key-encryption keys wrapping the segments on disk (rewrap counts them as in use). */
  kekIdsInUse(): string[] {
    return this.#segments.kekIdsInUse();
  }

  /**
   * Retires every segment now, the one being written too, lull or not, and returns the
   * key-encryption keys of the segments still on disk: rewrap's way of letting an old key go.
   */
  async retireAll(): Promise<string[]> {
    await this.#oneRoundAtATime(() => this.#retireRound(true));
    return this.#segments.kekIdsInUse();
  }

  #oneRoundAtATime<T>(round: () => Promise<T>): Promise<T> {
    const next = this.#round.then(round, round);
    this.#round = next.catch(() => undefined);
    return next;
  }

  async #retireRound(all: boolean): Promise<number> {
    // A segment holding a reference the index lacks must stay: its record is that reference's only copy.
    this.retireStep = 'restoring deferred references';
    await this.#restoreDeferred();
    const journal = this.#segments;
    this.retireStep = 'closing the idle segment';
    if (all) await journal.rotateNow();
    else await journal.rotateIfIdle(RETIRE_IDLE_MS);
    const mayGoOn = (): boolean => all || journal.idleFor(RETIRE_IDLE_MS) || journal.sealed.length >= RETIRE_BACKLOG;
    const segments: number[] = [];
    for (const segment of [...journal.sealed]) {
      if (!(await this.#materializeSegment(segment, mayGoOn))) break;
      segments.push(segment);
    }
    if (segments.length === 0) return 0;
    // A reference kept since the restore above may have its only copy in these segments: they stay.
    if (this.#deferred.length > 0) return 0;
    this.retireStep = 'checkpointing the index';
    await this.#refs.checkpoint();
    for (const segment of segments) {
      this.retireStep = `removing segment ${segment}`;
      for (const oid of this.#segmentOids.get(segment) ?? []) {
        if (this.#journaled.get(oid)?.segment === segment) this.#journaled.delete(oid);
      }
      this.#segmentOids.delete(segment);
      await journal.remove(segment);
    }
    return segments.length;
  }

  /** False if `mayGoOn` stopped it before the end. */
  async #materializeSegment(segment: number, mayGoOn: () => boolean): Promise<boolean> {
    if (!mayGoOn()) return false;
    const oids = [...(this.#segmentOids.get(segment) ?? [])];
    this.retireStep = `writing out the ${oids.length} objects of segment ${segment}`;
    // One descriptor for the whole segment: an open and close per object are threadpool round trips.
    const fh = await open(this.#segments.pathOf(segment), 'r');
    let next = 0;
    let stopped = false;
    const lane = async (): Promise<void> => {
      while (next < oids.length && !stopped) {
        const oid = oids[next++]!;
        const at = this.#journaled.get(oid);
        if (at === undefined || at.segment !== segment) continue;
        if (!mayGoOn()) {
          stopped = true;
          return;
        }
        try {
          if ((await this.#refs.isWanted(oid)) && (await this.inner.stat(oid)) === null) await this.#materialize(oid, at, fh.fd);
        } catch (e) {
          stopped = true; // the other lanes stop too; the segment waits for the next try
          throw e;
        }
      }
    };
    // Every lane settles before this returns, even when one fails: no write outlives the call.
    const lanes = await Promise.allSettled(Array.from({ length: RETIRE_LANES }, lane));
    await fh.close();
    const failed = lanes.find((l): l is PromiseRejectedResult => l.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    return !stopped;
  }

  /** Checks the bytes still hash to the oid before writing them below. */
  async #materialize(oid: Oid, at: JournalLocation, segmentFd: number): Promise<void> {
    const data = smallBuffers.take(at.length);
    try {
      if (!(await this.#segments.readData(segmentFd, at, data))) throw new Error(`journal record of ${oid} does not authenticate`);
      const digest = createHash('sha256').update(data).digest('hex');
      if (digest !== oid) throw new Error(`journal record of ${oid} hashes to ${digest}`);
      const w = await this.inner.createWriter(oid, { expectedSize: at.length });
      let r: PutResult;
      try {
        w.write(data, () => undefined); // held, not copied: the buffer goes back only after finish or abort
        r = await w.finish();
      } catch (e) {
        await w.abort();
        throw e;
      }
      const storedSize = r.created ? r.storedSize : ((await this.inner.stat(oid))?.storedSize ?? r.storedSize);
      // The index was told the object's own size at upload (#journalSmall): a plain copy needs no
      // write to the index, a compressed one does.
      if (storedSize !== at.length) await this.#refs.stored(oid, storedSize);
    } finally {
      smallBuffers.give(data);
    }
  }

  override async open(oid: Oid): Promise<BlobReader | null> {
    const below = await this.inner.open(oid);
    if (below !== null) return below;
    const at = this.#journaled.get(oid);
    if (at === undefined) return null;
    // Its own descriptor, which keeps the bytes if the segment retires while this download runs
    // (SegmentLog.openSegment). Opened and read in line, as the disk's objects are (see inline-reader.ts).
    let segment: { fd: number; close: () => void };
    try {
      segment = this.#segments.openSegment(at.segment);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return this.inner.open(oid); // just retired
      throw e;
    }
    if (at.record !== undefined) return this.#openSealed(oid, at, segment);
    return {
      size: at.length,
      storedSize: at.length,
      framed: false,
      ...plainReads(segment.fd, at.length, at.offset),
      close: async () => segment.close(),
    };
  }

  /** A sealed record is opened whole, then served from memory (at most SMALL_OBJECT_MAX): a record that does not authenticate is never served. */
  async #openSealed(oid: Oid, at: JournalLocation, segment: { fd: number; close: () => void }): Promise<BlobReader> {
    const bytes = smallBuffers.take(at.length);
    let authentic: boolean;
    try {
      authentic = await this.#segments.readData(segment.fd, at, bytes);
    } catch (e) {
      smallBuffers.give(bytes);
      throw e;
    } finally {
      segment.close();
    }
    if (!authentic) {
      smallBuffers.give(bytes);
      throw lfsError('LFS_ERR_OBJECT_DAMAGED', `Journaled object ${oid} is damaged (its sealed record does not authenticate); the object needs an audit`);
    }
    return { size: at.length, storedSize: at.length, framed: false, ...heldReads(bytes) };
  }

  override async stat(oid: Oid): Promise<BlobStat | null> {
    const below = await this.inner.stat(oid);
    if (below !== null) return below;
    const at = this.#journaled.get(oid);
    return at === undefined ? null : { size: at.length, storedSize: at.length, framed: false };
  }

  /** Drops the journaled bytes from view (the segment retires as usual) and deletes what is below. */
  override async delete(oid: Oid): Promise<boolean> {
    const journaled = this.#journaled.delete(oid);
    return (await this.inner.delete(oid)) || journaled;
  }

  override async *list(): AsyncIterable<StoredObject> {
    // Journaled objects are few (a bounded number of segments): listed first, then skipped below.
    const journaled = new Map(this.#journaled);
    for (const [oid, at] of journaled) yield { oid, storedSize: at.length };
    for await (const o of this.inner.list()) if (!journaled.has(o.oid)) yield o;
  }

  override async quarantine(oid: Oid): Promise<boolean> {
    const journaled = this.#journaled.delete(oid);
    return (await this.inner.quarantine(oid)) || journaled;
  }

  get flushStats(): JournalFlushes {
    return this.#segments.flushStats;
  }

  async close(): Promise<void> {
    await this.#segments.close();
  }
}

/** The reads of an object held whole in a pooled buffer, which `close` gives back. */
function heldReads(bytes: Buffer): Pick<BlobReader, 'read' | 'readAt' | 'close'> {
  let held: Buffer | null = bytes;
  const view = (start: number, length: number): Buffer => {
    if (held === null) throw new Error('object read after its reader was closed');
    if (start < 0 || start + length > held.byteLength) throw new Error(`read of ${length} bytes at ${start} past the object's ${held.byteLength}`);
    return held.subarray(start, start + length);
  };
  return {
    read: (start, end): ChunkSource => {
      let done = false;
      return {
        next: async () => (done ? null : ((done = true), view(start, end - start + 1))),
        close: async () => {
          done = true;
        },
      };
    },
    readAt: async (into, position) => {
      into.set(view(position, into.byteLength));
    },
    close: async () => {
      if (held !== null) smallBuffers.give(held);
      held = null;
    },
  };
}

/** A writer whose upload the journal holds no reference of: nothing to keep. */
function unjournaled(w: ObjectWriter): JournaledWriter {
  return {
    write: (c, r) => w.write(c, r),
    onDrain: (l) => w.onDrain(l),
    finish: async () => ({ ...(await w.finish()), keepReference: null }),
    abort: () => w.abort(),
  };
}

import type { Oid } from '../../protocol/oid.js';
import type {
  BlobReader,
  BlobStat,
  BlobStore,
  ChunkSource,
  LegacyLayout,
  ObjectWriter,
  Presigner,
  PutResult,
  StoredObject,
  WriterOptions,
} from '../types.js';

/** Operations a fault can be planned at, besides the byte-counted write and read faults. */
export type FaultPoint = 'createWriter' | 'finish' | 'open' | 'stat' | 'delete' | 'list' | 'quarantine' | 'sweepStaging' | 'checkWritable';

/** What FaultyBlobStore breaks. Faults hold for every call until `heal()`; an empty plan forwards everything. */
export interface FaultPlan {
  /** These operations reject (or throw) instead of reaching the store below. */
  readonly fail?: readonly FaultPoint[];
  /** A writer fails at the write() that takes it past this many bytes (that chunk is not forwarded). */
  readonly writeAfter?: number;
  /**
   * Where that failure shows: thrown by the write() itself ('write', the default), or held and
   * returned by finish() ('finish'), the way a disk's queued write error surfaces only later.
   */
  readonly writeFailsAt?: 'write' | 'finish';
  /** A chunk source fails at the next() that would take it past this many bytes. */
  readonly readAfter?: number;
  /** errno-style code of the injected errors: EIO (503 at the HTTP boundary) unless told, e.g. ENOSPC (507). */
  readonly code?: string;
}

/**
 * The error the faulty layer throws: shaped like a failed system call (`code`, `syscall`), so the
 * layers above and the HTTP boundary treat it as they would a real I/O error.
 */
export class InjectedFault extends Error {
  readonly code: string;
  readonly syscall: string;
  /** Brand that survives a wrapping layer's `cause` (see isInjectedFault). */
  readonly injected = true;

  constructor(point: string, code: string) {
    super(`${code}: fault injected at ${point} (faulty store layer)`);
    this.name = 'InjectedFault';
    this.code = code;
    this.syscall = point;
  }
}

/** Whether `e`, or an error it wraps (`cause`, as a layer above may wrap it), was injected by FaultyBlobStore. */
export function isInjectedFault(e: unknown): e is InjectedFault {
  for (let at = e, depth = 0; typeof at === 'object' && at !== null && depth < 8; depth++) {
    if ((at as { injected?: unknown }).injected === true) return true;
    at = (at as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Test-only fault injection as a store layer (docs/storage-contract.md; after
 * https://github.com/jasonwhite/rudolfs/blob/master/src/storage/faulty.rs):
 * wraps any BlobStore and, where its plan says so, fails an operation with an InjectedFault instead
 * of reaching the store below; everything else, capabilities included, is forwarded untouched. A
 * write that fails aborts the writer below at once, so the store below is left as clean as after
 * any other failed upload: a stack such as verify(faulty(disk)) can then be checked for "nothing
 * left behind", and for being usable again once healed. Never part of a production stack.
 */
export class FaultyBlobStore implements BlobStore {
  readonly #inner: BlobStore;
  #plan: FaultPlan;
  #injected = 0;

  constructor(inner: BlobStore, plan: FaultPlan = {}) {
    this.#inner = inner;
    this.#plan = plan;
  }

  /** The plan in force (read live: a fault set while a writer or reader is open applies to it). */
  get plan(): FaultPlan {
    return this.#plan;
  }

  /** How many faults were thrown so far: a test asserts that the fault it planned really fired. */
  get injected(): number {
    return this.#injected;
  }

  /** Replaces the whole plan. */
  setPlan(plan: FaultPlan): void {
    this.#plan = plan;
  }

  /** Forgets every fault: the store forwards everything again. */
  heal(): void {
    this.#plan = {};
  }

  /** Writers fail at the write() that takes them past `bytes` (see FaultPlan.writeFailsAt). */
  failWriteAfter(bytes: number, at: 'write' | 'finish' = 'write'): void {
    this.#plan = { ...this.#plan, writeAfter: bytes, writeFailsAt: at };
  }

  /** Chunk sources fail once they would return more than `bytes`. */
  failReadAfter(bytes: number): void {
    this.#plan = { ...this.#plan, readAfter: bytes };
  }

  /** `point` fails on every call until healed. */
  fail(point: FaultPoint): void {
    this.#plan = { ...this.#plan, fail: [...(this.#plan.fail ?? []), point] };
  }

  /** finish() aborts the writer below and rejects (a failed fsync or rename). */
  failFinish(): void {
    this.fail('finish');
  }

  /** open() rejects. */
  failOpen(): void {
    this.fail('open');
  }

  /** delete() rejects, and the object stays. */
  failDelete(): void {
    this.fail('delete');
  }

  get blockSize(): number {
    return this.#inner.blockSize;
  }

  get presigner(): Presigner | null {
    return this.#inner.presigner;
  }

  get legacy(): LegacyLayout | null {
    return this.#inner.legacy;
  }

  /** Not forwarded: uploads through a journal below would pass the faults by (see ForwardingBlobStore). */
  get journal(): null {
    return null;
  }

  /** Throws the planned fault for `point`, if any. */
  #check(point: FaultPoint): void {
    if (this.#plan.fail?.includes(point) === true) throw this.#fault(point);
  }

  #fault(point: string): InjectedFault {
    this.#injected++;
    return new InjectedFault(point, this.#plan.code ?? 'EIO');
  }

  async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    this.#check('createWriter');
    return new FaultyWriter(await this.#inner.createWriter(oid, options), {
      plan: () => this.#plan,
      fault: (point) => this.#fault(point),
    });
  }

  async open(oid: Oid): Promise<BlobReader | null> {
    this.#check('open');
    const reader = await this.#inner.open(oid);
    return reader === null ? null : new FaultyReader(reader, { plan: () => this.#plan, fault: (point) => this.#fault(point) });
  }

  async stat(oid: Oid): Promise<BlobStat | null> {
    this.#check('stat');
    return this.#inner.stat(oid);
  }

  async delete(oid: Oid): Promise<boolean> {
    this.#check('delete');
    return this.#inner.delete(oid);
  }

  async *list(): AsyncIterable<StoredObject> {
    this.#check('list');
    yield* this.#inner.list();
  }

  async quarantine(oid: Oid): Promise<boolean> {
    this.#check('quarantine');
    return this.#inner.quarantine(oid);
  }

  async sweepStaging(maxAgeMs: number): Promise<number> {
    this.#check('sweepStaging');
    return this.#inner.sweepStaging(maxAgeMs);
  }

  async checkWritable(): Promise<void> {
    this.#check('checkWritable');
    return this.#inner.checkWritable();
  }
}

/** What a writer or reader needs of its store: the live plan, and a way to count a fault it throws. */
interface FaultSource {
  plan(): FaultPlan;
  fault(point: string): InjectedFault;
}

class FaultyWriter implements ObjectWriter {
  readonly #inner: ObjectWriter;
  readonly #faults: FaultSource;
  #given = 0;
  #failure: InjectedFault | null = null;
  /** The abort of the writer below, started the moment a write failed. */
  #aborting: Promise<void> | null = null;

  constructor(inner: ObjectWriter, faults: FaultSource) {
    this.#inner = inner;
    this.#faults = faults;
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    if (this.#failure !== null) {
      // Dead writer: the chunk goes nowhere, but it is still the caller's to reuse.
      release?.();
      if (this.#faults.plan().writeFailsAt === 'finish') return true;
      throw this.#failure;
    }
    const plan = this.#faults.plan();
    if (plan.writeAfter !== undefined && this.#given + chunk.byteLength > plan.writeAfter) {
      this.#failure = this.#faults.fault('write');
      // Leave the store below clean now, as a real failed write would.
      this.#aborting = this.#inner.abort();
      this.#aborting.catch(() => undefined); // awaited (and reported) by finish or abort
      release?.();
      if (plan.writeFailsAt === 'finish') return true;
      throw this.#failure;
    }
    this.#given += chunk.byteLength;
    return release === undefined ? this.#inner.write(chunk) : this.#inner.write(chunk, release);
  }

  onDrain(listener: () => void): void {
    this.#inner.onDrain(listener);
  }

  async finish(): Promise<PutResult> {
    if (this.#failure === null && this.#faults.plan().fail?.includes('finish') === true) {
      this.#failure = this.#faults.fault('finish');
      this.#aborting = this.#inner.abort();
    }
    if (this.#failure !== null) {
      await this.#aborting;
      throw this.#failure;
    }
    return this.#inner.finish();
  }

  async abort(): Promise<void> {
    await this.#aborting;
    await this.#inner.abort();
  }
}

class FaultyReader implements BlobReader {
  readonly #inner: BlobReader;
  readonly #faults: FaultSource;

  constructor(inner: BlobReader, faults: FaultSource) {
    this.#inner = inner;
    this.#faults = faults;
  }

  get size(): number {
    return this.#inner.size;
  }

  get storedSize(): number {
    return this.#inner.storedSize;
  }

  get framed(): boolean | null {
    return this.#inner.framed;
  }

  read(start: number, end: number): ChunkSource {
    const inner = this.#inner.read(start, end);
    const faults = this.#faults;
    let given = 0;
    return {
      async next(): Promise<Uint8Array | null> {
        const chunk = await inner.next();
        if (chunk === null) return null;
        const after = faults.plan().readAfter;
        if (after !== undefined && given + chunk.byteLength > after) throw faults.fault('read');
        given += chunk.byteLength;
        return chunk;
      },
      close: () => inner.close(),
    };
  }

  async readAt(into: Uint8Array, position: number): Promise<void> {
    const after = this.#faults.plan().readAfter;
    if (after !== undefined && position + into.byteLength > after) throw this.#faults.fault('read');
    await this.#inner.readAt(into, position);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

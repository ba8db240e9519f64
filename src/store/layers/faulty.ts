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
  readonly fail?: readonly FaultPoint[];
  /** A writer fails at the write() that takes it past this many bytes (that chunk is not forwarded). */
  readonly writeAfter?: number;
  /** Thrown by write() itself ('write', the default) or held for finish() ('finish'), as a disk's queued write error surfaces later. */
  readonly writeFailsAt?: 'write' | 'finish';
  /** A chunk source fails at the next() that would take it past this many bytes. */
  readonly readAfter?: number;
  /** errno-style code of the injected errors: EIO (503 at the HTTP boundary) unless told, e.g. ENOSPC (507). */
  readonly code?: string;
}

/** Shaped like a failed system call (`code`, `syscall`), so the layers above treat it as a real I/O error. */
export class InjectedFault extends Error {
  readonly code: string;
  readonly syscall: string;
  readonly injected = true;

  constructor(point: string, code: string) {
    super(`${code}: fault injected at ${point} (faulty store layer)`);
    this.name = 'InjectedFault';
    this.code = code;
    this.syscall = point;
  }
}

/** Whether `e`, or an error it wraps (`cause`), was injected by FaultyBlobStore. */
export function isInjectedFault(e: unknown): e is InjectedFault {
  for (let at = e, depth = 0; typeof at === 'object' && at !== null && depth < 8; depth++) {
    if ((at as { injected?: unknown }).injected === true) return true;
    at = (at as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Test-only fault injection as a store layer (after
 * https://github.com/jasonwhite/rudolfs/blob/master/src/storage/faulty.rs). A failed write aborts the
 * writer below at once, so a stack can be checked for "nothing left behind". Never in production.
 */
export class FaultyBlobStore implements BlobStore {
  readonly #inner: BlobStore;
  #plan: FaultPlan;
  #injected = 0;

  constructor(inner: BlobStore, plan: FaultPlan = {}) {
    this.#inner = inner;
    this.#plan = plan;
  }

  /** Read live: a fault set while a writer or reader is open applies to it. */
  get plan(): FaultPlan {
    return this.#plan;
  }

  /** How many faults were thrown so far: a test asserts that the fault it planned really fired. */
  get injected(): number {
    return this.#injected;
  }

  setPlan(plan: FaultPlan): void {
    this.#plan = plan;
  }

  heal(): void {
    this.#plan = {};
  }

  failWriteAfter(bytes: number, at: 'write' | 'finish' = 'write'): void {
    this.#plan = { ...this.#plan, writeAfter: bytes, writeFailsAt: at };
  }

  failReadAfter(bytes: number): void {
    this.#plan = { ...this.#plan, readAfter: bytes };
  }

  fail(point: FaultPoint): void {
    this.#plan = { ...this.#plan, fail: [...(this.#plan.fail ?? []), point] };
  }

  /** finish() aborts the writer below and rejects (a failed fsync or rename). */
  failFinish(): void {
    this.fail('finish');
  }

  failOpen(): void {
    this.fail('open');
  }

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

interface FaultSource {
  plan(): FaultPlan;
  fault(point: string): InjectedFault;
}

class FaultyWriter implements ObjectWriter {
  readonly #inner: ObjectWriter;
  readonly #faults: FaultSource;
  #given = 0;
  #failure: InjectedFault | null = null;
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

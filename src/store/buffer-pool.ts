import { zstd } from '../format/native-codecs.js';
import { FRAME_SIZE } from '../format/frame-format.js';

/** How long a pool keeps its idle buffers after its last use: a burst reuses them, a server at rest gives them back. */
export const POOL_IDLE_MS = 10_000;

let afterRelease: (() => void) | null = null;
let poolsInUse = 0;

/** Runs once every pool has let its idle buffers go (a forced collection; never while a pool is in use, as it throws away optimized code). */
export function onPoolsReleased(fn: (() => void) | null): void {
  afterRelease = fn;
}

class IdleRelease {
  readonly #release: () => void;
  readonly #restMs: number;
  #used = false;
  #timer: NodeJS.Timeout | null = null;

  constructor(release: () => void, restMs: number) {
    this.#release = release;
    this.#restMs = restMs;
  }

  touch(): void {
    this.#used = true;
    if (this.#timer !== null) return;
    poolsInUse++;
    this.#arm();
  }

  #arm(): void {
    this.#used = false;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      if (this.#used) return this.#arm();
      this.#release();
      if (--poolsInUse > 0) return;
      // A timer, not setImmediate: an unref'd immediate waits for the loop's next wake-up, seconds at rest.
      setTimeout(() => afterRelease?.(), 0).unref();
    }, this.#restMs);
    this.#timer.unref(); // never keeps a process alive
  }
}

/** Reusable transfer buffers: fresh ones per chunk leave garbage V8 collects late. Plain ArrayBuffers, so they can move to a worker and back. */
export class BufferPool {
  #size: number | (() => number);
  readonly #free: ArrayBuffer[] = [];
  readonly #keep: number;
  readonly #idle: IdleRelease;

  /** `keep`: idle buffers retained during a burst. `size` may be a function, so a native library computing it loads only at first use. */
  constructor(size: number | (() => number), keep: number, restMs = POOL_IDLE_MS) {
    this.#size = size;
    this.#keep = keep;
    this.#idle = new IdleRelease(() => (this.#free.length = 0), restMs);
  }

  get size(): number {
    if (typeof this.#size === 'function') this.#size = this.#size();
    return this.#size;
  }

  take(): ArrayBuffer {
    this.#idle.touch();
    return this.#free.pop() ?? new ArrayBuffer(this.size);
  }

  give(buffer: ArrayBuffer): void {
    // A buffer that was moved to a worker and not returned is detached (byteLength 0): drop it.
    if (buffer.byteLength === this.size && this.#free.length < this.#keep) this.#free.push(buffer);
  }

  get idle(): number {
    return this.#free.length;
  }
}

/** Alignment of memory, file offsets and lengths that O_DIRECT writes need (4 KiB covers every common disk). */
export const DIRECT_ALIGN = 4096;
const alignedSlabs = new WeakSet<ArrayBufferLike>();
const WASM_PAGE = 64 << 10;

/**
 * Page-aligned buffers for O_DIRECT (malloc'd memory is not aligned: EINVAL), one WebAssembly memory
 * each so a pooled buffer never keeps a part-used slab alive; an ordinary buffer if V8 refuses one.
 */
export class AlignedBufferPool {
  readonly size: number;
  readonly #keep: number;
  readonly #shared: boolean;
  readonly #free: Buffer[] = [];
  readonly #idle: IdleRelease;

  constructor(size: number, options: { keep: number; shared?: boolean; restMs?: number }) {
    if (size % WASM_PAGE !== 0) throw new Error(`aligned buffers are whole 64 KiB pages, not ${size} bytes`);
    this.size = size;
    this.#keep = options.keep;
    this.#shared = options.shared ?? false;
    this.#idle = new IdleRelease(() => (this.#free.length = 0), options.restMs ?? POOL_IDLE_MS);
  }

  /** As a Buffer, so copies into it are one native memcpy (see ChunkGatherer). */
  takeView(): Buffer {
    this.#idle.touch();
    const free = this.#free.pop();
    if (free !== undefined) return free;
    const pages = this.size / WASM_PAGE;
    let memory: ArrayBufferLike;
    try {
      memory = new WebAssembly.Memory({ initial: pages, maximum: pages, shared: this.#shared }).buffer;
      alignedSlabs.add(memory);
    } catch {
      memory = this.#shared ? new SharedArrayBuffer(this.size) : new ArrayBuffer(this.size);
    }
    return Buffer.from(memory);
  }

  takeIdleView(): Buffer | null {
    const free = this.#free.pop() ?? null;
    if (free !== null) this.#idle.touch();
    return free;
  }

  giveView(view: Buffer): void {
    if (this.#free.length < this.#keep) this.#free.push(view);
  }

  get idle(): number {
    return this.#free.length;
  }
}

export function isAlignedMemory(view: Uint8Array): boolean {
  return alignedSlabs.has(view.buffer) && view.byteOffset % DIRECT_ALIGN === 0;
}

export const IO_CHUNK = 1 << 20;

/** Where a plain read buffer starts in its ArrayBuffer: the kernel copies at half speed to a destination 1–31 bytes off the source within a page. */
export const READ_SKEW = 64;
export const ioBuffers = new BufferPool(IO_CHUNK + READ_SKEW, 64);
/** The raw writers' buffers: aligned for O_DIRECT (see StagingFile), shared so the hasher reads them in place. */
export const directBuffers = new AlignedBufferPool(IO_CHUNK, { keep: 64, shared: true });

/** A download's read buffer: an upload's idle one if any, else a plain one; never a new aligned memory, so downloads cannot starve uploads. */
export function takeReadBuffer(): Uint8Array {
  return directBuffers.takeIdleView() ?? new Uint8Array(ioBuffers.take(), READ_SKEW, IO_CHUNK);
}

export function giveReadBuffer(view: Uint8Array): void {
  if (alignedSlabs.has(view.buffer)) directBuffers.giveView(view as Buffer);
  else if (view.buffer instanceof ArrayBuffer) ioBuffers.give(view.buffer);
}

/** Copies `source` into `target` at `at` with one native memcpy (set() between shared and plain memory goes element-wise). */
export function copyBytes(target: Uint8Array, at: number, source: Uint8Array): void {
  Buffer.prototype.copy.call(source, target, at);
}

/** Copies incoming chunks (uWS reuses them once its callback returns) into pooled buffers: the writers' one copy of each byte. */
export class ChunkGatherer {
  readonly #pool: AlignedBufferPool;
  readonly #onFull: (buffer: Buffer, length: number) => void;
  #buf: Buffer | null = null;
  #fill = 0;

  constructor(pool: AlignedBufferPool, onFull: (buffer: Buffer, length: number) => void) {
    this.#pool = pool;
    this.#onFull = onFull;
  }

  get empty(): boolean {
    return this.#fill === 0;
  }

  add(chunk: Uint8Array): void {
    let off = 0;
    while (off < chunk.byteLength) {
      this.#buf ??= this.#pool.takeView();
      const n = Math.min(chunk.byteLength - off, this.#buf.byteLength - this.#fill);
      // fill() is one native memcpy; set() into shared memory takes V8's slow element-wise path.
      this.#buf.fill(chunk.subarray(off, off + n), this.#fill, this.#fill + n);
      this.#fill += n;
      off += n;
      if (this.#fill === this.#buf.byteLength) this.flush();
    }
  }

  /**
   * The next `length` bytes of the block at hand, for the caller to write in place of an add(), when
   * they fit in it; else null. commit(length) once they are written.
   */
  reserve(length: number): Buffer | null {
    this.#buf ??= this.#pool.takeView();
    return this.#buf.byteLength - this.#fill < length ? null : this.#buf.subarray(this.#fill, this.#fill + length);
  }

  commit(length: number): void {
    this.#fill += length;
    if (this.#fill === this.#buf!.byteLength) this.flush();
  }

  flush(): void {
    const buf = this.#buf;
    const len = this.#fill;
    this.#buf = null;
    this.#fill = 0;
    if (buf === null) return;
    if (len > 0) this.#onFull(buf, len);
    else this.#pool.giveView(buf);
  }

  discard(): void {
    if (this.#buf !== null) this.#pool.giveView(this.#buf);
    this.#buf = null;
    this.#fill = 0;
  }
}

/** Small objects' and journal records' buffers by power-of-two class: fresh ones per small upload drive V8 into back-to-back full collections. */
export class SizedBufferPool {
  static readonly MIN_CLASS = 12;
  readonly #classes = new Map<number, ArrayBuffer[]>();
  readonly #idle: IdleRelease;

  constructor(restMs = POOL_IDLE_MS) {
    this.#idle = new IdleRelease(() => this.#classes.clear(), restMs);
  }

  get idle(): number {
    let n = 0;
    for (const free of this.#classes.values()) n += free.length;
    return n;
  }

  take(length: number): Buffer {
    this.#idle.touch();
    const bits = Math.max(SizedBufferPool.MIN_CLASS, Math.ceil(Math.log2(Math.max(1, length))));
    const ab = this.#classes.get(bits)?.pop() ?? new ArrayBuffer(2 ** bits);
    return Buffer.from(ab, 0, length);
  }

  give(buf: Buffer): void {
    const ab = buf.buffer;
    if (!(ab instanceof ArrayBuffer) || buf.byteOffset !== 0) return;
    const bits = Math.log2(ab.byteLength);
    if (!Number.isInteger(bits) || bits < SizedBufferPool.MIN_CLASS) return;
    let free = this.#classes.get(bits);
    if (free === undefined) this.#classes.set(bits, (free = []));
    if (free.length < Math.max(2, (4 << 20) >> bits)) free.push(ab);
  }
}

export const smallBuffers = new SizedBufferPool();

const blockPools = new Map<number, AlignedBufferPool>([[IO_CHUNK, directBuffers]]);

/** The pool of aligned, shared blocks of `size` bytes the verify layer gathers an upload into: the hasher, frame workers and O_DIRECT writes read them in place. */
export function blockPool(size: number): AlignedBufferPool {
  let pool = blockPools.get(size);
  if (pool === undefined) blockPools.set(size, (pool = new AlignedBufferPool(size, { keep: 16, shared: true })));
  return pool;
}

export const frameBuffers = new BufferPool(FRAME_SIZE, 16);
export const compressedBuffers = new BufferPool(() => zstd().compressBound(FRAME_SIZE), 16);

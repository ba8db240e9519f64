import { zstd } from '../format/native-codecs.js';
import { FRAME_SIZE } from '../format/frame-format.js';

/** How long a pool keeps its idle buffers after its last use: a burst reuses them, a server at rest gives them back. */
export const POOL_IDLE_MS = 10_000;

let afterRelease: (() => void) | null = null;
/** Pools used within their last spell (their release still to come); at 0 every pool rests, and is collected once. */
let poolsInUse = 0;

/**
 * Sets what runs once every pool has let its idle buffers go: the process entry asks V8 to collect
 * them, since at rest no allocation would make it. Not while any pool is still in use: a forced
 * collection throws away much of V8's optimized code, which requests still coming pay to compile
 * again; a busy process collects on its own.
 */
export function onPoolsReleased(fn: (() => void) | null): void {
  afterRelease = fn;
}

/**
 * Calls `release` once its pool has gone unused for POOL_IDLE_MS (between one and two spells after
 * its last use), and the collection once no pool is in use.
 */
class IdleRelease {
  readonly #release: () => void;
  readonly #restMs: number;
  #used = false;
  #timer: NodeJS.Timeout | null = null;

  constructor(release: () => void, restMs: number) {
    this.#release = release;
    this.#restMs = restMs;
  }

  /** The pool was used: its buffers stay for another spell. */
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

/**
 * Fixed-size, reusable transfer buffers: fresh Buffers per chunk leave garbage V8 collects late,
 * which shows as RSS growth during a large transfer. Plain ArrayBuffers, so they can be moved to a
 * worker thread and back.
 */
export class BufferPool {
  #size: number | (() => number);
  readonly #free: ArrayBuffer[] = [];
  readonly #keep: number;
  readonly #idle: IdleRelease;

  /**
   * `keep`: most idle buffers retained during a burst; all are left to the GC once the pool has
   * rested `restMs`. `size` may be a function, called at the first use (a size a native library
   * computes, so the library loads only when the pool is used).
   */
  constructor(size: number | (() => number), keep: number, restMs = POOL_IDLE_MS) {
    this.#size = size;
    this.#keep = keep;
    this.#idle = new IdleRelease(() => (this.#free.length = 0), restMs);
  }

  /** Bytes of each buffer. */
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

  /** Idle buffers held now. */
  get idle(): number {
    return this.#free.length;
  }
}

/** Alignment of memory, file offsets and lengths that O_DIRECT writes need (4 KiB covers every common disk). */
export const DIRECT_ALIGN = 4096;
/** The WebAssembly memories behind AlignedBufferPool's buffers; see isAlignedMemory. */
const alignedSlabs = new WeakSet<ArrayBufferLike>();
const WASM_PAGE = 64 << 10;

/**
 * Buffers whose memory starts on a page boundary, for O_DIRECT writes: malloc'd ArrayBuffers are not
 * aligned (O_DIRECT fails with EINVAL), a WebAssembly memory is mapped on pages of its own. One
 * memory per buffer, so a pooled buffer never keeps a part-used slab alive. `shared` buffers are
 * read in place by workers. Should V8 refuse another memory, the pool hands out an ordinary buffer,
 * which is simply written through the page cache.
 */
export class AlignedBufferPool {
  readonly size: number;
  readonly #keep: number;
  readonly #shared: boolean;
  readonly #free: Buffer[] = [];
  readonly #idle: IdleRelease;

  /** `restMs`: how long unused before every idle buffer is let go (POOL_IDLE_MS unless a test says). */
  constructor(size: number, options: { keep: number; shared?: boolean; restMs?: number }) {
    if (size % WASM_PAGE !== 0) throw new Error(`aligned buffers are whole 64 KiB pages, not ${size} bytes`);
    this.size = size;
    this.#keep = options.keep;
    this.#shared = options.shared ?? false;
    this.#idle = new IdleRelease(() => (this.#free.length = 0), options.restMs ?? POOL_IDLE_MS);
  }

  /** A whole buffer, as a Buffer (so copies into it are one native memcpy: see ChunkGatherer). */
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

  /** An idle buffer if the pool holds one, else null: nothing new is mapped. */
  takeIdleView(): Buffer | null {
    const free = this.#free.pop() ?? null;
    if (free !== null) this.#idle.touch();
    return free;
  }

  giveView(view: Buffer): void {
    if (this.#free.length < this.#keep) this.#free.push(view);
  }

  /** Idle buffers held now. */
  get idle(): number {
    return this.#free.length;
  }
}

/** True when `view` starts on a DIRECT_ALIGN boundary of memory from AlignedBufferPool. */
export function isAlignedMemory(view: Uint8Array): boolean {
  return alignedSlabs.has(view.buffer) && view.byteOffset % DIRECT_ALIGN === 0;
}

/** I/O chunk for raw objects: big enough for full-speed disk and socket writes. */
export const IO_CHUNK = 1 << 20;

/**
 * Where a plain read buffer's bytes start in its ArrayBuffer: malloc puts a 1 MiB buffer 16 bytes
 * into a page, and the kernel's copy runs at half speed when the destination sits 1–31 bytes past
 * the source within a page; 64 bytes in, it runs as fast as into aligned memory.
 */
export const READ_SKEW = 64;
/** Plain read buffers (see takeReadBuffer): IO_CHUNK bytes from READ_SKEW. */
export const ioBuffers = new BufferPool(IO_CHUNK + READ_SKEW, 64);
/**
 * The raw writers' buffers: aligned, so full ones go to disk with O_DIRECT (see StagingFile), and
 * shared, so the hasher reads them in place.
 */
export const directBuffers = new AlignedBufferPool(IO_CHUNK, { keep: 64, shared: true });

/**
 * A 1 MiB buffer for a download's reads: an upload's idle one when the pool holds one (one set of
 * buffers for both directions), else a plain one. Reads never map new aligned memories, which
 * reserve address space, so downloads cannot leave uploads without them.
 */
export function takeReadBuffer(): Uint8Array {
  return directBuffers.takeIdleView() ?? new Uint8Array(ioBuffers.take(), READ_SKEW, IO_CHUNK);
}

/** Returns a buffer from takeReadBuffer to the pool it came from. */
export function giveReadBuffer(view: Uint8Array): void {
  if (alignedSlabs.has(view.buffer)) directBuffers.giveView(view as Buffer);
  else if (view.buffer instanceof ArrayBuffer) ioBuffers.give(view.buffer);
}

/**
 * Copies incoming chunks (which uWS reuses once its callback returns) into buffers from a pool and
 * hands each full buffer on; the writers' one copy of every uploaded byte.
 */
export class ChunkGatherer {
  readonly #pool: AlignedBufferPool;
  readonly #onFull: (buffer: Buffer, length: number) => void;
  #buf: Buffer | null = null;
  #fill = 0;

  constructor(pool: AlignedBufferPool, onFull: (buffer: Buffer, length: number) => void) {
    this.#pool = pool;
    this.#onFull = onFull;
  }

  /** True when nothing is gathered: the next byte starts a new buffer. */
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

  /** Hands on the buffer being filled, if it holds anything. */
  flush(): void {
    const buf = this.#buf;
    const len = this.#fill;
    this.#buf = null;
    this.#fill = 0;
    if (buf === null) return;
    if (len > 0) this.#onFull(buf, len);
    else this.#pool.giveView(buf);
  }

  /** Drops what was gathered (an aborted upload). */
  discard(): void {
    if (this.#buf !== null) this.#pool.giveView(this.#buf);
    this.#buf = null;
    this.#fill = 0;
  }
}

/**
 * Buffers for small objects and their journal records, pooled by power-of-two size class: fresh
 * buffers per small upload drive V8 into back-to-back full collections. Each class keeps at most
 * about 4 MiB idle, and none once the pool has rested for POOL_IDLE_MS.
 */
export class SizedBufferPool {
  static readonly MIN_CLASS = 12;
  readonly #classes = new Map<number, ArrayBuffer[]>();
  readonly #idle: IdleRelease;

  constructor(restMs = POOL_IDLE_MS) {
    this.#idle = new IdleRelease(() => this.#classes.clear(), restMs);
  }

  /** Idle buffers held now, all classes together. */
  get idle(): number {
    let n = 0;
    for (const free of this.#classes.values()) n += free.length;
    return n;
  }

  /** A Buffer of exactly `length` bytes (contents undefined) over a pooled ArrayBuffer. */
  take(length: number): Buffer {
    this.#idle.touch();
    const bits = Math.max(SizedBufferPool.MIN_CLASS, Math.ceil(Math.log2(Math.max(1, length))));
    const ab = this.#classes.get(bits)?.pop() ?? new ArrayBuffer(2 ** bits);
    return Buffer.from(ab, 0, length);
  }

  /** Returns a buffer from `take`; the caller must not touch it afterwards. */
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

/** One aligned, shared pool per block size (see blockPool). */
const blockPools = new Map<number, AlignedBufferPool>([[IO_CHUNK, directBuffers]]);

/**
 * The pool of aligned, shared blocks of `size` bytes: what the verify layer gathers an upload into
 * and hands down the stack, so the hasher, the frame workers and O_DIRECT writes all read the
 * same memory in place (no copy per layer).
 */
export function blockPool(size: number): AlignedBufferPool {
  let pool = blockPools.get(size);
  if (pool === undefined) blockPools.set(size, (pool = new AlignedBufferPool(size, { keep: 16, shared: true })));
  return pool;
}

/** A download's frames, decoded (see FramedChunkSource). */
export const frameBuffers = new BufferPool(FRAME_SIZE, 16);
/** Stored (compressed) frames: of uploads on their way down, of downloads on their way up. */
export const compressedBuffers = new BufferPool(() => zstd().compressBound(FRAME_SIZE), 16);

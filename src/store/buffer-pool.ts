import zstd from 'zstd-napi/binding.js';
import { FRAME_SIZE } from '../format/frame-format.js';

/**
 * Fixed-size, reusable transfer buffers. Streaming through freshly allocated Buffers leaves garbage
 * that V8 collects only after ~64 MiB of external memory piles up, which shows as RSS growth of
 * tens of MiB per multi-gigabyte transfer; reusing a few buffers keeps memory flat instead.
 * Buffers are plain ArrayBuffers so they can be moved to a worker thread and back.
 */
export class BufferPool {
  readonly size: number;
  readonly #free: ArrayBuffer[] = [];
  readonly #keep: number;

  /** `keep`: most idle buffers retained; more are left to the GC after a burst. */
  constructor(size: number, keep: number) {
    this.size = size;
    this.#keep = keep;
  }

  take(): ArrayBuffer {
    return this.#free.pop() ?? new ArrayBuffer(this.size);
  }

  give(buffer: ArrayBuffer): void {
    // A buffer that was moved to a worker and not returned is detached (byteLength 0): drop it.
    if (buffer.byteLength === this.size && this.#free.length < this.#keep) this.#free.push(buffer);
  }
}

/** Alignment of memory, file offsets and lengths that O_DIRECT writes need (4 KiB covers every common disk). */
export const DIRECT_ALIGN = 4096;
/** The WebAssembly memories behind AlignedBufferPool's buffers; see isAlignedMemory. */
const alignedSlabs = new WeakSet<ArrayBufferLike>();
const WASM_PAGE = 64 << 10;

/**
 * Buffers whose memory starts on a page boundary, for O_DIRECT writes (direct I/O moves bytes from
 * the buffer to the disk, so the address must be aligned). A plain ArrayBuffer's memory comes from
 * malloc, which puts its bookkeeping in front of it (measured: O_DIRECT writes from it fail with
 * EINVAL); a WebAssembly memory is mapped by V8 on its own pages. Each buffer is a memory of its
 * own: buffers carved from a shared slab would keep the whole slab alive for as long as any one of
 * them sits in the pool, so after a burst the pool could hold many part-used slabs. Idle buffers
 * past `keep` are dropped to the GC. `shared` buffers are SharedArrayBuffers: a worker reads them in
 * place, with nothing moved. Should V8 refuse another memory (each reserves address space), the pool
 * hands out an ordinary buffer, which is simply written through the page cache.
 */
export class AlignedBufferPool {
  readonly size: number;
  readonly #keep: number;
  readonly #shared: boolean;
  readonly #free: Buffer[] = [];

  constructor(size: number, options: { keep: number; shared?: boolean }) {
    if (size % WASM_PAGE !== 0) throw new Error(`aligned buffers are whole 64 KiB pages, not ${size} bytes`);
    this.size = size;
    this.#keep = options.keep;
    this.#shared = options.shared ?? false;
  }

  /** A whole buffer, as a Buffer (so copies into it are one native memcpy: see ChunkGatherer). */
  takeView(): Buffer {
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

  giveView(view: Buffer): void {
    if (this.#free.length < this.#keep) this.#free.push(view);
  }
}

/** True when `view` starts on a DIRECT_ALIGN boundary of memory from AlignedBufferPool. */
export function isAlignedMemory(view: Uint8Array): boolean {
  return alignedSlabs.has(view.buffer) && view.byteOffset % DIRECT_ALIGN === 0;
}

/** I/O chunk for raw objects: big enough for full-speed disk and socket writes. */
export const IO_CHUNK = 1 << 20;

export const ioBuffers = new BufferPool(IO_CHUNK, 64);
/**
 * The raw writers' buffers: aligned, so full ones go to disk with O_DIRECT (see StagingFile), and
 * shared, so the hash thread reads them in place.
 */
export const directBuffers = new AlignedBufferPool(IO_CHUNK, { keep: 64, shared: true });

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
      // fill() is one native memcpy; set() into shared memory from a uWS chunk took V8's slow
      // element-wise path (measured: 0.35 ms per MiB on the HTTP thread instead of ~0.03).
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
 * Buffers for small objects and their journal records, pooled by power-of-two size class. A stream of
 * 64 KiB uploads otherwise allocates two or three fresh buffers per object, and that external memory
 * drives V8 into back-to-back full collections (measured: concurrent marking took about a third of
 * the server's CPU in a burst of 2,000 such uploads). Each class keeps at most about 4 MiB idle.
 */
export class SizedBufferPool {
  static readonly MIN_CLASS = 12;
  readonly #classes = new Map<number, ArrayBuffer[]>();

  /** A Buffer of exactly `length` bytes (contents undefined) over a pooled ArrayBuffer. */
  take(length: number): Buffer {
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
 * and hands down the stack, so the hash thread, the frame workers and O_DIRECT writes all read the
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
export const compressedBuffers = new BufferPool(zstd.compressBound(FRAME_SIZE), 16);

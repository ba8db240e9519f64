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

/** I/O chunk for raw objects: big enough for full-speed disk and socket writes. */
export const IO_CHUNK = 1 << 20;
/**
 * Uncompressed size of one zstd frame of new framed objects (the trailer records it, so objects
 * written with another size stay readable). 2 MiB loses almost nothing in ratio against 4 MiB
 * (measured: text 2.790 vs 2.793, mesh-like 1.780 vs 1.781) and halves the memory per transfer;
 * 1 MiB measured worse on this machine (compressed download 786 vs 890 MB/s, and more RSS growth).
 */
export const FRAME_SIZE = 2 << 20;

export const ioBuffers = new BufferPool(IO_CHUNK, 64);

/**
 * Copies incoming chunks (which uWS reuses once its callback returns) into buffers from a pool and
 * hands each full buffer on; the writers' one copy of every uploaded byte.
 */
export class ChunkGatherer {
  readonly #pool: BufferPool;
  readonly #onFull: (buffer: ArrayBuffer, length: number) => void;
  #buf: ArrayBuffer | null = null;
  #fill = 0;

  constructor(pool: BufferPool, onFull: (buffer: ArrayBuffer, length: number) => void) {
    this.#pool = pool;
    this.#onFull = onFull;
  }

  add(chunk: Uint8Array): void {
    let off = 0;
    while (off < chunk.byteLength) {
      this.#buf ??= this.#pool.take();
      const n = Math.min(chunk.byteLength - off, this.#buf.byteLength - this.#fill);
      new Uint8Array(this.#buf, this.#fill, n).set(chunk.subarray(off, off + n));
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
    else this.#pool.give(buf);
  }

  /** Drops what was gathered (an aborted upload). */
  discard(): void {
    if (this.#buf !== null) this.#pool.give(this.#buf);
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

import { read as fsRead } from 'node:fs';
import { giveReadBuffer, IO_CHUNK, takeReadBuffer } from './buffer-pool.js';
import type { ChunkSource } from './types.js';

/**
 * Chunks being read while the consumer sends the one it has, so a cold file keeps the disk busy.
 * Bounded: a download holds at most READ_AHEAD + 1 pooled buffers.
 */
export const READ_AHEAD = 3;

function readInto(fd: number, buf: Uint8Array, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) => {
    fsRead(fd, buf, 0, length, position, (err, n) => (err ? reject(err) : resolve(n)));
  });
}

interface PendingRead {
  readonly buf: Uint8Array;
  readonly done: Promise<number>;
}

/**
 * Reads bytes [start, end] of a plain file in pooled 1 MiB chunks, READ_AHEAD reads ahead of the
 * consumer: while chunk k goes out on the socket, the next ones are read.
 */
export class RawChunkSource implements ChunkSource {
  readonly #fd: number;
  #pos: number;
  readonly #end: number; // exclusive
  readonly #ahead: PendingRead[] = [];
  #current: Uint8Array | null = null;
  #closed = false;

  constructor(fd: number, start: number, endInclusive: number) {
    this.#fd = fd;
    this.#pos = start;
    this.#end = endInclusive + 1;
  }

  /** Starts reads until READ_AHEAD are in flight or the range is all asked for. */
  #fill(): void {
    while (this.#ahead.length < READ_AHEAD && this.#pos < this.#end) {
      const len = Math.min(IO_CHUNK, this.#end - this.#pos);
      const position = this.#pos;
      this.#pos += len;
      const buf = takeReadBuffer();
      const done = readInto(this.#fd, buf, len, position).then((n) => {
        if (n !== len) throw new Error(`short read at ${position}: ${n} of ${len} bytes (file truncated?)`);
        return n;
      });
      done.catch(() => undefined); // surfaced by next(); never an unhandled rejection meanwhile
      this.#ahead.push({ buf, done });
    }
  }

  async next(): Promise<Uint8Array | null> {
    if (this.#closed) return null;
    if (this.#current !== null) {
      giveReadBuffer(this.#current);
      this.#current = null;
    }
    this.#fill();
    const first = this.#ahead.shift();
    if (first === undefined) return null;
    let n: number;
    try {
      n = await first.done;
    } catch (e) {
      giveReadBuffer(first.buf);
      throw e;
    }
    this.#current = first.buf;
    this.#fill(); // the next reads go on while this one is sent
    return first.buf.subarray(0, n);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#current !== null) giveReadBuffer(this.#current);
    this.#current = null;
    const pending = this.#ahead.splice(0);
    // A buffer goes back only once its read is over: the kernel may still be writing into it.
    await Promise.all(pending.map((p) => p.done.then(() => giveReadBuffer(p.buf), () => giveReadBuffer(p.buf))));
  }
}

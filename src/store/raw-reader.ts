import { read as fsRead } from 'node:fs';
import { ioBuffers } from './buffer-pool.js';
import type { ChunkSource } from './types.js';

function readInto(fd: number, buf: ArrayBuffer, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) => {
    fsRead(fd, new Uint8Array(buf, 0, length), 0, length, position, (err, n) => (err ? reject(err) : resolve(n)));
  });
}

/**
 * Reads bytes [start, end] of a plain file in pooled 1 MiB chunks, one read ahead of the consumer:
 * while chunk k goes out on the socket, chunk k+1 is read, and at most two buffers are held.
 */
export class RawChunkSource implements ChunkSource {
  readonly #fd: number;
  #pos: number;
  readonly #end: number; // exclusive
  #ahead: Promise<{ buf: ArrayBuffer; n: number }> | null = null;
  #current: ArrayBuffer | null = null;
  #closed = false;

  constructor(fd: number, start: number, endInclusive: number) {
    this.#fd = fd;
    this.#pos = start;
    this.#end = endInclusive + 1;
  }

  #startRead(): void {
    if (this.#pos >= this.#end) {
      this.#ahead = null;
      return;
    }
    const len = Math.min(ioBuffers.size, this.#end - this.#pos);
    const position = this.#pos;
    this.#pos += len;
    const buf = ioBuffers.take();
    this.#ahead = readInto(this.#fd, buf, len, position).then(
      (n) => {
        if (n !== len) throw new Error(`short read at ${position}: ${n} of ${len} bytes (file truncated?)`);
        return { buf, n };
      },
      (e: unknown) => {
        ioBuffers.give(buf);
        throw e;
      },
    );
    this.#ahead.catch(() => undefined); // surfaced by next(); never an unhandled rejection meanwhile
  }

  async next(): Promise<Uint8Array | null> {
    if (this.#closed) return null;
    if (this.#current !== null) {
      ioBuffers.give(this.#current);
      this.#current = null;
    }
    if (this.#ahead === null) {
      this.#startRead();
      if (this.#ahead === null) return null;
    }
    const { buf, n } = await this.#ahead!;
    this.#current = buf;
    this.#startRead(); // read ahead while this one is sent
    return new Uint8Array(buf, 0, n);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#current !== null) ioBuffers.give(this.#current);
    this.#current = null;
    const ahead = this.#ahead;
    this.#ahead = null;
    if (ahead) await ahead.then((r) => ioBuffers.give(r.buf), () => undefined);
  }
}

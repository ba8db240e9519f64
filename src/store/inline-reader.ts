import { readSync } from 'node:fs';
import { smallBuffers } from './buffer-pool.js';
import { readFully } from './framed-reader.js';
import { RawChunkSource } from './raw-reader.js';
import type { ChunkSource } from './types.js';

/**
 * Reads up to this size run on the calling thread. A read of a small object's bytes from the page
 * cache takes a few µs in line; through libuv's threadpool each one costs a thread wake-up and an
 * event-loop wake-up (cross-CPU interrupts in this VM), several times the read itself. A clone
 * makes one GET per object, so that was most of a small download's CPU.
 */
export const INLINE_READ_MAX = 256 << 10;

/** Fills `buf` from `position` of a file on this thread; a short read (a truncated file) is an error. */
export function readFullySync(fd: number, buf: Uint8Array, position: number): void {
  for (let at = 0; at < buf.byteLength; ) {
    const n = readSync(fd, buf, at, buf.byteLength - at, position + at);
    if (n <= 0) throw new Error(`short read at ${position}: ${at} of ${buf.byteLength} bytes (file truncated?)`);
    at += n;
  }
}

/** readFully for a plain file: in line when small (see INLINE_READ_MAX), else through the threadpool. */
export function readPlainAt(fd: number, into: Uint8Array, position: number): Promise<void> {
  if (into.byteLength > INLINE_READ_MAX) return readFully(fd, into, position);
  try {
    readFullySync(fd, into, position);
    return Promise.resolve();
  } catch (e) {
    return Promise.reject(e);
  }
}

/** Bytes [start, end] of a plain file as a ChunkSource: one in-line read when small, else RawChunkSource. */
export function plainSource(fd: number, start: number, endInclusive: number): ChunkSource {
  return endInclusive - start + 1 <= INLINE_READ_MAX ? new InlineChunkSource(fd, start, endInclusive) : new RawChunkSource(fd, start, endInclusive);
}

/** A small range read whole, in line, into one pooled buffer held until the next call or close. */
class InlineChunkSource implements ChunkSource {
  readonly #fd: number;
  readonly #start: number;
  readonly #length: number;
  #buf: Buffer | null = null;
  #done = false;

  constructor(fd: number, start: number, endInclusive: number) {
    this.#fd = fd;
    this.#start = start;
    this.#length = endInclusive - start + 1;
  }

  async next(): Promise<Uint8Array | null> {
    this.#release();
    if (this.#done || this.#length <= 0) return null;
    this.#done = true;
    const buf = smallBuffers.take(this.#length);
    try {
      readFullySync(this.#fd, buf, this.#start);
    } catch (e) {
      smallBuffers.give(buf);
      throw e;
    }
    this.#buf = buf;
    return buf;
  }

  async close(): Promise<void> {
    this.#done = true;
    this.#release();
  }

  #release(): void {
    if (this.#buf !== null) smallBuffers.give(this.#buf);
    this.#buf = null;
  }
}

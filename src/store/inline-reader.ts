import { readSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { smallBuffers } from './buffer-pool.js';
import { readFully } from './framed-reader.js';
import { RawChunkSource } from './raw-reader.js';
import type { BlobReader, ChunkSource, InLineObject } from './types.js';

/**
 * Objects up to this size are read on the calling thread: a small read from the page cache is
 * quicker in line than the threadpool's round trip (a thread wake-up, then the event loop's), and a
 * clone makes one GET per object.
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

/**
 * The reads of a plain object of `size` bytes stored at `base` in the file `fd`: in line when the
 * whole object is small (a cold read then holds the event loop for one small read at most), through
 * the threadpool otherwise, so range reads of large objects and their frames never block it.
 */
export function plainReads(fd: number, size: number, base = 0): Pick<BlobReader, 'read' | 'readAt'> {
  if (size > INLINE_READ_MAX) {
    return { read: (start, end) => new RawChunkSource(fd, base + start, base + end), readAt: (into, position) => readFully(fd, into, base + position) };
  }
  return {
    read: (start, end) => new InlineChunkSource(fd, base + start, base + end),
    readAt: (into, position) => {
      try {
        readFullySync(fd, into, base + position);
        return Promise.resolve();
      } catch (e) {
        return Promise.reject(e);
      }
    },
  };
}

/**
 * A small object's bytes read whole at open, in line, into one pooled buffer that its reader holds
 * until close; the descriptor is closed at once. The compress layer's trailer probe and the
 * download's read are then copies from memory: one `pread` per small GET instead of two, and no
 * descriptor held while the response goes out.
 */
export function readWhole(fd: number, size: number): Pick<BlobReader, 'read' | 'readAt' | 'close'> {
  let held: Buffer | null = readPooled(fd, size);
  const bytes = (start: number, length: number): Buffer => {
    if (held === null) throw new Error('object read after its reader was closed');
    if (start < 0 || start + length > held.byteLength) throw new Error(`read of ${length} bytes at ${start} past the object's ${held.byteLength}`);
    return held.subarray(start, start + length);
  };
  return {
    read: (start, end) => new MemoryChunkSource(() => bytes(start, end - start + 1)),
    readAt: async (into, position) => {
      into.set(bytes(position, into.byteLength));
    },
    close: async () => {
      if (held !== null) smallBuffers.give(held);
      held = null;
    },
  };
}

/**
 * A small object's bytes read whole, in line, into a pooled buffer (BlobStore.openInLine); undefined
 * when the read fails, so that `open` meets the failure again and reports it as it always does.
 */
export function readInLine(fd: number, size: number): InLineObject | undefined {
  let bytes: Buffer;
  try {
    bytes = readPooled(fd, size);
  } catch {
    return undefined;
  }
  let held = true;
  return {
    bytes,
    release: () => {
      if (held) smallBuffers.give(bytes);
      held = false;
    },
  };
}

/** The first `size` bytes of the file into a pooled buffer, given back if the read fails. */
function readPooled(fd: number, size: number): Buffer {
  const bytes = smallBuffers.take(size);
  try {
    readFullySync(fd, bytes, 0);
  } catch (e) {
    smallBuffers.give(bytes);
    throw e;
  }
  return bytes;
}

/** One range of bytes in memory, handed out once; the reader that holds them gives the buffer back. */
class MemoryChunkSource implements ChunkSource {
  #slice: (() => Uint8Array) | null;

  constructor(slice: () => Uint8Array) {
    this.#slice = slice;
  }

  async next(): Promise<Uint8Array | null> {
    const slice = this.#slice;
    this.#slice = null;
    return slice === null ? null : slice();
  }

  async close(): Promise<void> {
    this.#slice = null;
  }
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

/**
 * Opens a file on the threadpool (a name that may block on open, such as a FIFO, or a file from
 * another server's layout) as a plain object; null when absent. `framed` as the caller knows it.
 */
export async function openOnThreadpool(path: string, framed: boolean | null): Promise<BlobReader | null> {
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  const { size } = await fh.stat().catch(async (e: unknown) => {
    await fh.close();
    throw e;
  });
  return { size, storedSize: size, framed, ...plainReads(fh.fd, size), close: () => fh.close() };
}

import { read as fsRead } from 'node:fs';
import { zstd } from '../format/native-codecs.js';
import { lfsError } from '../errors/errors.js';
import type { FrameCodec } from '../format/frame-codec.js';
import { compressedBuffers, frameBuffers } from './buffer-pool.js';
import { frameLength, type FrameIndex } from '../format/frame-format.js';
import type { ChunkSource } from './types.js';

interface DecodedFrame {
  /** The one buffer still held: the frame's logical bytes are at its start. */
  readonly buffer: ArrayBuffer;
  readonly bytes: Uint8Array;
}

/** Frames decoded ahead of the socket: two keep both pool threads busy on a compressed download. */
const READ_AHEAD = 2;

/** Reads a frame's stored bytes: exactly `into.byteLength` bytes from `position` of the object. */
export type StoredReader = (position: number, into: Uint8Array) => Promise<void>;

/** Fills `buf` from `position` of a file; a short read (a truncated file) is an error. */
export function readFully(fd: number, buf: Uint8Array, position: number): Promise<void> {
  return new Promise((resolve, reject) => {
    fsRead(fd, buf, 0, buf.byteLength, position, (err, n) => {
      if (err) reject(err);
      else if (n !== buf.byteLength) reject(new Error(`short read at ${position}: ${n} of ${buf.byteLength} bytes (file truncated?)`));
      else resolve();
    });
  });
}

/**
 * Bytes [start, end] of a framed object from a file or a bucket: only the frames the range touches are
 * read, each BLAKE3-checked and decompressed on the worker pool, one frame ahead of the socket. A
 * damaged frame fails the read (LFS_ERR_OBJECT_DAMAGED): an error or a cut connection, never wrong
 * bytes. Memory: two frames per download.
 */
export class FramedChunkSource implements ChunkSource {
  readonly #readStored: StoredReader;
  readonly #index: FrameIndex;
  readonly #pool: FrameCodec;
  readonly #start: number;
  readonly #end: number; // inclusive
  #next: number; // next frame to fetch
  readonly #last: number;
  /** Frames being read and decoded, in order. */
  readonly #ahead: { readonly i: number; readonly frame: Promise<DecodedFrame> }[] = [];
  #current: DecodedFrame | null = null;
  #closed = false;

  constructor(readStored: StoredReader, index: FrameIndex, pool: FrameCodec, start: number, end: number) {
    this.#readStored = readStored;
    this.#index = index;
    this.#pool = pool;
    this.#start = start;
    this.#end = end;
    this.#next = Math.floor(start / index.frameSize);
    this.#last = Math.floor(end / index.frameSize);
  }

  #fetch(i: number): Promise<DecodedFrame> {
    const entry = this.#index.frames[i]!;
    const length = frameLength(this.#index, i);
    // Pooled buffers fit frames of the current size; an object written with another size gets its own.
    const current = this.#index.frameSize === frameBuffers.size;
    const stored = current ? compressedBuffers.take() : new ArrayBuffer(zstd().compressBound(this.#index.frameSize));
    const out = current ? frameBuffers.take() : new ArrayBuffer(this.#index.frameSize);
    const p = (async (): Promise<DecodedFrame> => {
      try {
        await this.#readStored(this.#index.offsets[i]!, new Uint8Array(stored, 0, entry.storedLength));
      } catch (e) {
        compressedBuffers.give(stored);
        frameBuffers.give(out);
        throw e;
      }
      const r = await this.#pool.decode({ stored, storedLength: entry.storedLength, codec: entry.codec, digest: entry.digest, out, length });
      if (r.damage !== null) {
        compressedBuffers.give(r.stored);
        frameBuffers.give(r.out);
        throw lfsError('LFS_ERR_OBJECT_DAMAGED', `Stored frame ${i} is damaged (${r.damage}); the object needs an audit`);
      }
      // Keep only the buffer that holds the bytes; the other goes back to its pool at once.
      if (r.in === 'stored') {
        frameBuffers.give(r.out);
        return { buffer: r.stored, bytes: new Uint8Array(r.stored, 0, length) };
      }
      compressedBuffers.give(r.stored);
      return { buffer: r.out, bytes: new Uint8Array(r.out, 0, length) };
    })();
    p.catch(() => undefined); // surfaced by next(); never an unhandled rejection
    return p;
  }

  #release(f: DecodedFrame): void {
    // Each pool ignores a buffer of another size, so this works whichever one held the bytes.
    frameBuffers.give(f.buffer);
    compressedBuffers.give(f.buffer);
  }

  async next(): Promise<Uint8Array | null> {
    if (this.#closed) return null;
    if (this.#current !== null) {
      this.#release(this.#current);
      this.#current = null;
    }
    this.#fillAhead();
    const head = this.#ahead.shift();
    if (head === undefined) return null;
    const frame = await head.frame;
    this.#current = frame;
    this.#fillAhead(); // decode the next frames while this one goes out
    // Clip the frame to the requested range.
    const frameStart = head.i * this.#index.frameSize;
    const from = Math.max(0, this.#start - frameStart);
    const to = Math.min(frame.bytes.byteLength, this.#end - frameStart + 1);
    return frame.bytes.subarray(from, to);
  }

  #fillAhead(): void {
    while (this.#ahead.length < READ_AHEAD && this.#next <= this.#last) {
      this.#ahead.push({ i: this.#next, frame: this.#fetch(this.#next++) });
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#current !== null) this.#release(this.#current);
    this.#current = null;
    const ahead = this.#ahead.splice(0);
    await Promise.all(ahead.map((a) => a.frame.then((f) => this.#release(f), () => undefined)));
  }
}

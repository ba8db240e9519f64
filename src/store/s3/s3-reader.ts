import { lfsError } from '../../errors/errors.js';
import type { WorkerPool } from '../../workers/pool.js';
import { frameLength, type FrameIndex } from '../frame-format.js';
import { compressedBuffers, frameBuffers } from '../framed-writer.js';
import type { ChunkSource } from '../types.js';
import type { S3Client, S3Reply } from './s3-client.js';

/**
 * Bytes [start, end] of one object through a ranged GET. The body is pulled chunk by chunk, so
 * undici stops reading the socket while the client is slow (read-ahead bounded by the stream's
 * high-water mark); close() destroys the body, ending the request.
 */
export class S3ChunkSource implements ChunkSource {
  readonly #client: S3Client;
  readonly #key: string;
  readonly #range: string;
  readonly #length: number;
  #reply: S3Reply | null = null;
  #iter: AsyncIterator<Buffer> | null = null;
  #received = 0;
  #closed = false;

  constructor(client: S3Client, key: string, start: number, endInclusive: number) {
    this.#client = client;
    this.#key = key;
    this.#range = `bytes=${start}-${endInclusive}`;
    this.#length = endInclusive - start + 1;
  }

  async next(): Promise<Uint8Array | null> {
    if (this.#closed || this.#received >= this.#length) return null;
    if (this.#iter === null) {
      this.#reply = await this.#client.send({ method: 'GET', key: this.#key, headers: { range: this.#range } });
      this.#iter = (this.#reply.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
    }
    const r = await this.#iter.next();
    if (r.done) {
      if (this.#received !== this.#length) throw new Error(`object ended after ${this.#received} of ${this.#length} bytes (changed in the bucket?)`);
      return null;
    }
    this.#received += r.value.byteLength;
    if (this.#received > this.#length) throw new Error('the bucket sent more bytes than the range asked for');
    return r.value;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#reply?.body.destroy();
    this.#reply = null;
  }
}

interface DecodedFrame {
  readonly stored: ArrayBuffer;
  readonly out: ArrayBuffer;
  /** The frame's logical bytes (a view of `stored` or `out`). */
  readonly bytes: Uint8Array;
}

/**
 * Bytes [start, end] of a framed object in the bucket (frame-format.ts): one ranged GET per frame
 * the range touches, each frame's BLAKE3 checked and decompressed on the worker pool, one frame ahead
 * of the socket (framed-reader.ts reads the same format from a file). A damaged frame fails the read
 * with LFS_ERR_OBJECT_DAMAGED; never wrong bytes. Memory: two frames (in + out buffers) per download.
 */
export class S3FramedChunkSource implements ChunkSource {
  readonly #client: S3Client;
  readonly #key: string;
  readonly #index: FrameIndex;
  readonly #pool: WorkerPool;
  readonly #start: number;
  readonly #end: number; // inclusive
  #next: number;
  readonly #last: number;
  #ahead: { readonly i: number; readonly frame: Promise<DecodedFrame> } | null = null;
  #current: DecodedFrame | null = null;
  #closed = false;

  constructor(client: S3Client, key: string, index: FrameIndex, pool: WorkerPool, start: number, end: number) {
    this.#client = client;
    this.#key = key;
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
    const stored = compressedBuffers.take();
    const out = frameBuffers.take();
    const p = (async (): Promise<DecodedFrame> => {
      try {
        await readRange(this.#client, this.#key, this.#index.offsets[i]!, new Uint8Array(stored, 0, entry.storedLength));
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
      const bytes = r.in === 'stored' ? new Uint8Array(r.stored, 0, length) : new Uint8Array(r.out, 0, length);
      return { stored: r.stored, out: r.out, bytes };
    })();
    p.catch(() => undefined); // surfaced by next(); never an unhandled rejection
    return p;
  }

  #release(f: DecodedFrame): void {
    compressedBuffers.give(f.stored);
    frameBuffers.give(f.out);
  }

  async next(): Promise<Uint8Array | null> {
    if (this.#closed) return null;
    if (this.#current !== null) {
      this.#release(this.#current);
      this.#current = null;
    }
    if (this.#ahead === null) {
      if (this.#next > this.#last) return null;
      this.#ahead = { i: this.#next, frame: this.#fetch(this.#next++) };
    }
    const { i, frame: pending } = this.#ahead;
    this.#ahead = null;
    const frame = await pending;
    this.#current = frame;
    if (this.#next <= this.#last) this.#ahead = { i: this.#next, frame: this.#fetch(this.#next++) };
    const frameStart = i * this.#index.frameSize;
    const from = Math.max(0, this.#start - frameStart);
    const to = Math.min(frame.bytes.byteLength, this.#end - frameStart + 1);
    return frame.bytes.subarray(from, to);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#current !== null) this.#release(this.#current);
    this.#current = null;
    const ahead = this.#ahead;
    this.#ahead = null;
    if (ahead) await ahead.frame.then((f) => this.#release(f), () => undefined);
  }
}

/** Reads exactly `into.byteLength` bytes of `key` from `position` with one ranged GET. */
export async function readRange(client: S3Client, key: string, position: number, into: Uint8Array): Promise<void> {
  if (into.byteLength === 0) return;
  const r = await client.send({ method: 'GET', key, headers: { range: `bytes=${position}-${position + into.byteLength - 1}` } });
  let at = 0;
  for await (const chunk of r.body as AsyncIterable<Buffer>) {
    if (at + chunk.byteLength > into.byteLength) {
      r.body.destroy();
      throw new Error('the bucket sent more bytes than the range asked for');
    }
    into.set(chunk, at);
    at += chunk.byteLength;
  }
  if (at !== into.byteLength) throw new Error(`short ranged read at ${position}: ${at} of ${into.byteLength} bytes`);
}

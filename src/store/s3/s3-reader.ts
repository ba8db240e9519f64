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

import { lfsError } from '../../errors/errors.js';
import type { ChunkSource } from '../types.js';
import { SOURCE_ETAG_META } from './s3-bucket.js';
import { discard, isTransportError, unavailable, type S3Client, type S3Reply } from './s3-client.js';

/** The stored version a reader opened, and where that version goes when it is deleted or replaced. */
export interface ReadTarget {
  readonly key: string;
  /** The trash key: delete() and a replacing write copy the key there before it changes. */
  readonly fallbackKey: string;
  readonly etag: string | null;
}

/**
 * Bytes [start, end] of one object version by ranged GET, pulled so undici stops reading while the
 * client is slow. A read never sees a later delete or replacement (types.ts BlobReader): the GET
 * carries `If-Match`, and on 404 or 412 reads the trash copy if it is the opened version.
 */
export class S3ChunkSource implements ChunkSource {
  readonly #client: S3Client;
  readonly #target: ReadTarget;
  readonly #range: string;
  readonly #length: number;
  #reply: S3Reply | null = null;
  #iter: AsyncIterator<Buffer> | null = null;
  #received = 0;
  #closed = false;
  readonly #start: number;
  /** Bytes still to drop from the front: a store that sent more than the Range asked for. */
  #skip = 0;

  constructor(client: S3Client, target: ReadTarget, start: number, endInclusive: number) {
    this.#client = client;
    this.#target = target;
    this.#start = start;
    this.#range = `bytes=${start}-${endInclusive}`;
    this.#length = endInclusive - start + 1;
  }

  async next(): Promise<Uint8Array | null> {
    if (this.#closed || this.#received >= this.#length) return null;
    if (this.#iter === null) {
      this.#reply = await this.#get();
      // Some S3-compatible stores answer a one-byte Range with the whole object: read from where it starts.
      const sent = sentRange(this.#reply, this.#start);
      if (sent.start > this.#start || sent.end < this.#start + this.#length - 1) throw new Error(`the bucket sent bytes ${sent.start}-${sent.end}, not the range asked for (${this.#range})`);
      this.#skip = this.#start - sent.start;
      this.#iter = (this.#reply.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
    }
    for (;;) {
      // A body that stalled past the deadline (SVC_S3_DEADLINE between two pieces) is the bucket's outage.
      const r = await this.#iter.next().catch((e: unknown) => {
        throw isTransportError(e) ? unavailable(e) : e;
      });
      if (r.done) {
        if (this.#received !== this.#length) throw new Error(`object ended after ${this.#received} of ${this.#length} bytes (changed in the bucket?)`);
        return null;
      }
      let chunk = r.value;
      if (this.#skip > 0) {
        const drop = Math.min(this.#skip, chunk.byteLength);
        this.#skip -= drop;
        chunk = chunk.subarray(drop);
        if (chunk.byteLength === 0) continue;
      }
      if (this.#received + chunk.byteLength > this.#length) chunk = chunk.subarray(0, this.#length - this.#received);
      this.#received += chunk.byteLength;
      return chunk;
    }
  }

  async #get(): Promise<S3Reply> {
    const { key, fallbackKey, etag } = this.#target;
    const headers: Record<string, string> = { range: this.#range };
    if (etag !== null) headers['if-match'] = `"${etag}"`;
    const r = await this.#client.send({ method: 'GET', key, headers, accept: [404, 412] });
    if (r.status !== 404 && r.status !== 412) return r;
    await discard(r.body);
    const t = await this.#client.send({ method: 'GET', key: fallbackKey, headers: { range: this.#range }, accept: [404] });
    if (t.status !== 404 && (etag === null || t.headers[SOURCE_ETAG_META] === etag)) return t;
    if (t.status === 404) await discard(t.body);
    else t.body.on('error', () => undefined).destroy(); // another version's bytes: not read, the request ended
    throw lfsError('LFS_ERR_OBJECT_NOT_FOUND', 'The object was removed from the bucket while it was being read');
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#reply?.body.destroy();
    this.#reply = null;
  }
}

function sentRange(reply: S3Reply, asked: number): { start: number; end: number } {
  const length = Number(reply.headers['content-length']);
  if (reply.status === 200) return { start: 0, end: length - 1 };
  const m = /^bytes (\d+)-(\d+)\//.exec(String(reply.headers['content-range'] ?? ''));
  return m === null ? { start: asked, end: asked + length - 1 } : { start: Number(m[1]), end: Number(m[2]) };
}

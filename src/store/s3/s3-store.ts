import { createHash, randomBytes } from 'node:crypto';
import { lfsError } from '../../errors/errors.js';
import { shardPath, type Oid } from '../../protocol/oid.js';
import type { WorkerPool } from '../../workers/pool.js';
import { INDEX_ENTRY_SIZE, TRAILER_SIZE, decodeIndex, decodeTrailer, type FrameIndex } from '../../format/frame-format.js';
import type { BlobReader, BlobStore, ObjectWriter, PutResult, WriterOptions } from '../types.js';
import { discard, S3Client, S3ResponseError, type S3Location } from './s3-client.js';
const FRAMED_META = { name: 'x-amz-meta-stowage-format', value: 'frames-v1' } as const;
import { FramedChunkSource } from '../framed-reader.js';
import { readRange, S3ChunkSource } from './s3-reader.js';
import { S3Writer } from './s3-writer.js';

/** Objects smaller than this are always stored as they arrive (as on disk: not worth a frame index). */
export const MIN_FRAMED_SIZE = 4096;

/** Largest object one presigned PUT may carry (S3's single-PUT limit); larger ones are proxied. */
export const MAX_PRESIGNED_PUT = 5 * 1024 ** 3;

/** A presigned link: the URL and the headers the client must send with it. */
export interface SignedLink {
  readonly href: string;
  readonly header: Readonly<Record<string, string>>;
}

export interface S3StoreOptions extends S3Location {
  /** Key prefix inside the bucket: '' or ending with '/'. */
  readonly prefix: string;
  /** Worker pool that compresses and decodes frames. */
  readonly pool: WorkerPool;
  /** zstd level for new objects (SVC_COMPRESSION), or null to store them as they arrive. */
  readonly compressionLevel: number | null;
}

/**
 * The shared content-addressed store in an S3-compatible bucket, with the disk store's layout:
 * `{prefix}objects/ab/cd/<oid>`, one copy per oid. Uploads through the server stream straight to
 * the final key as a multipart upload completed only after verification (see S3Writer); presigned
 * uploads land under `{prefix}incoming/<repo hash>/<oid>` and reach the shared keyspace only through
 * promoteIncoming(), after the digest was confirmed. Objects are stored as they arrive (no frames).
 */
export class S3BlobStore implements BlobStore {
  readonly #client: S3Client;
  readonly #prefix: string;
  readonly #pool: WorkerPool;
  readonly #level: number | null;
  /** True when the bucket refuses a PUT whose body does not match x-amz-checksum-sha256 (probed). */
  #checksumEnforced = false;

  private constructor(client: S3Client, options: S3StoreOptions) {
    this.#client = client;
    this.#prefix = options.prefix;
    this.#pool = options.pool;
    this.#level = options.compressionLevel;
  }

  /** No I/O: a bucket that is down at start makes /ready fail, not the process. */
  static open(options: S3StoreOptions): S3BlobStore {
    return new S3BlobStore(new S3Client(options), options);
  }

  /** Objects of this size or more are compressed on the way in (so never presigned); null when off. */
  get compressFrom(): number | null {
    return this.#level === null ? null : MIN_FRAMED_SIZE;
  }

  get checksumEnforced(): boolean {
    return this.#checksumEnforced;
  }

  /** Final key of an oid; the Oid brand guarantees 64 hex digits. */
  keyOf(oid: Oid): string {
    return `${this.#prefix}objects/${shardPath(oid)}`;
  }

  /** Per-repository landing key of a presigned upload; the repository key is hashed (no odd characters in keys). */
  incomingKey(repoKey: string, oid: Oid): string {
    const repo = createHash('sha256').update(repoKey).digest('hex').slice(0, 32);
    return `${this.#prefix}incoming/${repo}/${oid}`;
  }

  #stagingKey(name: string): string {
    return `${this.#prefix}staging/${name}.${randomBytes(8).toString('hex')}`;
  }

  async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const framed = this.#level !== null && (options.expectedSize === null || options.expectedSize >= MIN_FRAMED_SIZE);
    void framed; // interim: the S3 backend is being rewritten onto the storage contract
    return new S3Writer(this.#client, this.keyOf(oid), oid, options.expectedSize);
  }

  async open(oid: Oid): Promise<BlobReader | null> {
    const key = this.keyOf(oid);
    const head = await this.#client.send({ method: 'HEAD', key, accept: [404] });
    await discard(head.body);
    if (head.status === 404) return null;
    const size = Number(head.headers['content-length']);
    // Only keys the framed writer wrote can hold frames; they are checked by their trailer as on disk.
    const index = head.headers[FRAMED_META.name] === FRAMED_META.value ? await this.#readFrameIndex(key, size) : null;
    if (index !== null) {
      return {
        size: index.logicalSize,
        storedSize: size,
        framed: true,
        read: (start, end) => new FramedChunkSource((position, into) => readRange(this.#client, key, position, into), index, this.#pool, start, end),
        close: async () => undefined,
      };
    }
    return {
      size,
      storedSize: size,
      framed: false,
      read: (start, end) => new S3ChunkSource(this.#client, key, start, end),
      close: async () => undefined,
    };
  }

  /** The frame index of a framed key, or null for a plain one (frame-format.ts). */
  async #readFrameIndex(key: string, size: number): Promise<FrameIndex | null> {
    if (size < TRAILER_SIZE) return null;
    const t = Buffer.alloc(TRAILER_SIZE);
    await readRange(this.#client, key, size - TRAILER_SIZE, t);
    const trailer = decodeTrailer(t, size);
    if (trailer === null) return null;
    const index = Buffer.alloc(trailer.frameCount * INDEX_ENTRY_SIZE);
    await readRange(this.#client, key, trailer.indexOffset, index);
    return decodeIndex(index, trailer);
  }

  /** Size of a key, or null when it does not exist. */
  async #size(key: string, headers?: Record<string, string>): Promise<number | null> {
    const r = await this.#client.send({ method: 'HEAD', key, accept: [404], headers });
    await discard(r.body);
    if (r.status === 404) return null;
    return Number(r.headers['content-length']);
  }

  async #delete(key: string): Promise<void> {
    const r = await this.#client.send({ method: 'DELETE', key, accept: [404] });
    await discard(r.body);
  }

  /** Server-side copy (≤ 5 GiB, enough for presigned uploads). */
  async #copy(from: string, to: string): Promise<void> {
    const source = `/${this.#client.bucket}/${from.split('/').map(encodeURIComponent).join('/')}`;
    const r = await this.#client.sendText({ method: 'PUT', key: to, headers: { 'x-amz-copy-source': source } });
    // CopyObject may answer 200 and carry the failure in the body.
    if (/<Error>/.test(r.text)) throw new Error(`CopyObject failed: ${/<Code>([^<]*)/.exec(r.text)?.[1] ?? 'unknown'}`);
  }

  /**
   * Staging litter: multipart uploads and presigned landing/staging keys older than maxAgeMs. Several
   * nodes may share the bucket, so nothing younger than MIN_SWEEP_AGE is touched, whatever is asked.
   */
  async sweepStaging(maxAgeMs: number): Promise<number> {
    const cutoff = Date.now() - Math.max(maxAgeMs, MIN_SWEEP_AGE_MS);
    let removed = 0;
    try {
      const r = await this.#client.sendText({ method: 'GET', key: '', query: [['uploads', ''], ['prefix', `${this.#prefix}objects/`]] });
      for (const m of r.text.matchAll(/<Upload>([\s\S]*?)<\/Upload>/g)) {
        const key = /<Key>([^<]*)<\/Key>/.exec(m[1]!)?.[1];
        const id = /<UploadId>([^<]*)<\/UploadId>/.exec(m[1]!)?.[1];
        const at = Date.parse(/<Initiated>([^<]*)<\/Initiated>/.exec(m[1]!)?.[1] ?? '');
        if (key === undefined || id === undefined || !(at <= cutoff)) continue;
        const d = await this.#client.send({ method: 'DELETE', key: unescapeXml(key), query: [['uploadId', unescapeXml(id)]], accept: [404] });
        await discard(d.body);
        removed++;
      }
    } catch {
      // Not every S3-compatible store lists multipart uploads; a bucket lifecycle rule covers them there.
    }
    for (const dir of ['incoming/', 'staging/']) {
      try {
        const r = await this.#client.sendText({ method: 'GET', key: '', query: [['list-type', '2'], ['prefix', `${this.#prefix}${dir}`]] });
        for (const m of r.text.matchAll(/<Contents>([\s\S]*?)<\/Contents>/g)) {
          const key = /<Key>([^<]*)<\/Key>/.exec(m[1]!)?.[1];
          const at = Date.parse(/<LastModified>([^<]*)<\/LastModified>/.exec(m[1]!)?.[1] ?? '');
          if (key === undefined || !(at <= cutoff)) continue;
          await this.#delete(unescapeXml(key));
          removed++;
        }
      } catch {
        // Bucket unreachable: the next hourly sweep tries again.
      }
    }
    return removed;
  }

  /** /ready: the bucket answers and takes a write (a tiny probe object, removed again). */
  async checkWritable(): Promise<void> {
    const key = this.#stagingKey('.ready');
    const r = await this.#client.send({ method: 'PUT', key, headers: { 'content-length': '2' }, body: Buffer.from('ok') });
    await discard(r.body);
    await this.#delete(key);
  }

  /**
   * Start-up probe: does the bucket refuse a body that does not match `x-amz-checksum-sha256`?
   * AWS S3 does; several S3-compatible stores ignore the header. Only when it does is the header
   * bound into presigned PUTs and trusted at promotion; otherwise promotion hashes the bytes itself.
   * An unreachable bucket counts as "not enforced", the safe side.
   */
  async probeChecksumEnforcement(): Promise<boolean> {
    const key = this.#stagingKey('.checksum-probe');
    const wrong = createHash('sha256').update('not the body').digest('base64');
    try {
      const r = await this.#client.send({ method: 'PUT', key, headers: { 'content-length': '5', 'x-amz-checksum-sha256': wrong }, body: Buffer.from('probe') });
      await discard(r.body);
      await this.#delete(key).catch(() => undefined);
      this.#checksumEnforced = false;
    } catch (e) {
      this.#checksumEnforced = e instanceof S3ResponseError && e.status === 400;
    }
    return this.#checksumEnforced;
  }

  /** A presigned GET of a stored object (spec Authentication rule 15). */
  presignDownload(oid: Oid, expiresIn: number): SignedLink {
    return { href: this.#client.presign('GET', this.keyOf(oid), expiresIn), header: {} };
  }

  /**
   * A presigned PUT to this repository's landing key. When the bucket enforces it, the expected
   * sha256 is a signed header, so the bucket itself refuses other bytes.
   */
  presignUpload(repoKey: string, oid: Oid, expiresIn: number): SignedLink {
    const header: Record<string, string> = {};
    if (this.#checksumEnforced) header['x-amz-checksum-sha256'] = Buffer.from(oid, 'hex').toString('base64');
    return { href: this.#client.presign('PUT', this.incomingKey(repoKey, oid), expiresIn, header), header };
  }

  /**
   * The verify action of a presigned upload: moves the landing object into the shared keyspace only
   * once its size and sha256 are confirmed. Wrong bytes are deleted and never become visible.
   * Throws 404 when nothing was uploaded, 422 when size or digest differ.
   */
  async promoteIncoming(repoKey: string, oid: Oid, size: number): Promise<PutResult> {
    const incoming = this.incomingKey(repoKey, oid);
    const expectedB64 = Buffer.from(oid, 'hex').toString('base64');
    const head = await this.#client.send({ method: 'HEAD', key: incoming, accept: [404], headers: this.#checksumEnforced ? { 'x-amz-checksum-mode': 'ENABLED' } : undefined });
    await discard(head.body);
    if (head.status === 404) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
    const found = Number(head.headers['content-length']);
    if (found !== size) {
      await this.#delete(incoming);
      throw lfsError('LFS_ERR_SIZE_MISMATCH', `Uploaded object has ${found} bytes, not ${size}`);
    }
    const final = this.keyOf(oid);
    if (this.#checksumEnforced && head.headers['x-amz-checksum-sha256'] === expectedB64) {
      // The bucket checked the bytes against the signed checksum on the way in.
      const created = (await this.#size(final)) === null;
      if (created) await this.#copy(incoming, final);
      await this.#delete(incoming);
      return { size, storedSize: size, created };
    }
    // Copy first to a key no link can write, then hash that copy: a presigned URL still valid cannot
    // swap the bytes between the check and the promotion.
    const staging = this.#stagingKey(oid);
    try {
      await this.#copy(incoming, staging);
    } catch (e) {
      // A concurrent verify of the same upload took it first.
      if (e instanceof S3ResponseError && e.status === 404) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
      throw e;
    }
    await this.#delete(incoming);
    try {
      const hash = createHash('sha256');
      let n = 0;
      const r = await this.#client.send({ method: 'GET', key: staging });
      for await (const chunk of r.body as AsyncIterable<Buffer>) {
        hash.update(chunk);
        n += chunk.byteLength;
      }
      const digest = hash.digest('hex');
      if (n !== size) throw lfsError('LFS_ERR_SIZE_MISMATCH', `Uploaded object has ${n} bytes, not ${size}`);
      if (digest !== oid) throw lfsError('LFS_ERR_DIGEST_MISMATCH', `Uploaded content hashes to ${digest}, not to the oid ${oid}`);
      const created = (await this.#size(final)) === null;
      if (created) await this.#copy(staging, final);
      return { size, storedSize: size, created };
    } finally {
      await this.#delete(staging).catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    await this.#client.close();
  }
}

/** Litter younger than this is never swept (other nodes, presigned uploads in progress). */
const MIN_SWEEP_AGE_MS = 6 * 3600_000;

function unescapeXml(s: string): string {
  return s.replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
}

import { createHash } from 'node:crypto';
import { isLfsError, lfsError } from '../../errors/errors.js';
import { BufferPool } from '../buffer-pool.js';
import type { S3Bucket } from './s3-bucket.js';
import { discard, isTransportError, type S3Client } from './s3-client.js';

/** Multipart part size: S3 wants ≥ 5 MiB for all parts but the last, and at most 10,000 parts. */
export const PART_SIZE = 8 << 20;
const MAX_PARTS = 10_000;
/** Parts uploading at once per object; writers pause their source beyond this (docs/architecture.md, "Conventions"). */
export const MAX_PARTS_IN_FLIGHT = 2;
/** Pauses between attempts at aborting a given-up multipart upload (about 5 minutes in all). */
const ABORT_PAUSES_MS = [1_000, 2_000, 4_000, 8_000, 15_000, 30_000, 60_000, 60_000, 60_000, 60_000];
const partBuffers = new BufferPool(PART_SIZE, 6);

export interface UploadOptions {
  /** Sent with the PUT or CreateMultipartUpload (x-amz-meta-*). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Absent: an existing key is kept (same content-addressed bytes). Given: the existing copy is put aside for readers, then overwritten. */
  readonly retire?: () => Promise<void>;
}

export interface UploadResult {
  readonly storedSize: number;
  /** False when the key already existed (same content-addressed bytes) and this copy was dropped. */
  readonly created: boolean;
}

/**
 * Sequential bytes into one bucket key, invisible until complete(): one PUT when it fits a part,
 * otherwise multipart. Memory is at most (MAX_PARTS_IN_FLIGHT + 1) × PART_SIZE whatever the size.
 */
export class S3Upload {
  readonly #client: S3Client;
  readonly #bucket: S3Bucket;
  readonly #key: string;
  readonly #headers: Readonly<Record<string, string>>;
  readonly #retire: (() => Promise<void>) | null;
  readonly #partSize: number;
  readonly #smallSize: number | null;
  #buf: ArrayBuffer | null = null;
  #fill = 0;
  #total = 0;
  #uploadId: Promise<string> | null = null;
  readonly #etags: string[] = [];
  readonly #parts: Promise<void>[] = [];
  #inFlight = 0;
  #listener: (() => void) | null = null;
  #waiters: (() => void)[] = [];
  #failed: unknown = null;
  #done = false;

  /** `expected`: size of the content, if known (it sizes the buffers; more or fewer bytes may come). */
  constructor(client: S3Client, bucket: S3Bucket, key: string, expected: number | null, options: UploadOptions = {}) {
    this.#client = client;
    this.#bucket = bucket;
    this.#key = key;
    this.#headers = options.headers ?? {};
    this.#retire = options.retire ?? null;
    // Keep within 10,000 parts for very large announced sizes (whole MiB, so S3 accepts them).
    this.#partSize = expected === null ? PART_SIZE : Math.max(PART_SIZE, Math.ceil(expected / (MAX_PARTS - 100) / (1 << 20)) * (1 << 20));
    this.#smallSize = expected !== null && expected < this.#partSize ? expected : null;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get failed(): unknown {
    return this.#failed;
  }

  get total(): number {
    return this.#total;
  }

  onSettle(listener: () => void): void {
    this.#listener = listener;
  }

  async ready(): Promise<void> {
    while (this.#inFlight >= MAX_PARTS_IN_FLIGHT && this.#failed === null) await new Promise<void>((resolve) => this.#waiters.push(resolve));
    if (this.#failed !== null) throw this.#failed;
  }

  #takeBuffer(): ArrayBuffer {
    // A small object of known size needs only its own bytes, not a whole pooled part.
    if (this.#etags.length === 0 && this.#smallSize !== null) return new ArrayBuffer(Math.max(1, this.#smallSize));
    return this.#partSize === PART_SIZE ? partBuffers.take() : new ArrayBuffer(this.#partSize);
  }

  push(bytes: Uint8Array): void {
    if (this.#failed !== null) throw this.#failed;
    this.#total += bytes.byteLength;
    let off = 0;
    while (off < bytes.byteLength) {
      if (this.#buf !== null && this.#fill === this.#buf.byteLength && this.#buf.byteLength < this.#partSize) {
        // More than announced arrived into a right-sized buffer: grow to a part.
        const bigger = this.#partSize === PART_SIZE ? partBuffers.take() : new ArrayBuffer(this.#partSize);
        new Uint8Array(bigger).set(new Uint8Array(this.#buf, 0, this.#fill));
        this.#buf = bigger;
      }
      this.#buf ??= this.#takeBuffer();
      const n = Math.min(bytes.byteLength - off, this.#buf.byteLength - this.#fill);
      new Uint8Array(this.#buf, this.#fill, n).set(bytes.subarray(off, off + n));
      this.#fill += n;
      off += n;
      if (this.#fill === this.#partSize) this.#startPart();
    }
  }

  #startPart(): void {
    const buf = this.#buf!;
    const len = this.#fill;
    this.#buf = null;
    this.#fill = 0;
    if (this.#etags.length + 1 > MAX_PARTS) {
      this.#failed ??= lfsError('LFS_ERR_OBJECT_TOO_LARGE', 'Object needs more than 10,000 multipart parts');
      partBuffers.give(buf);
      return;
    }
    this.#uploadId ??= this.#client.sendText({ method: 'POST', key: this.#key, query: [['uploads', '']], headers: this.#headers }).then((r) => {
      const id = /<UploadId>([^<]+)<\/UploadId>/.exec(r.text)?.[1];
      if (id === undefined) throw new Error('CreateMultipartUpload answered without an UploadId');
      return id;
    });
    const index = this.#etags.length;
    this.#etags.push('');
    this.#inFlight++;
    const part = this.#uploadId
      .then(async (uploadId) => {
        const r = await this.#client.send({
          method: 'PUT',
          key: this.#key,
          query: [['partNumber', String(index + 1)], ['uploadId', uploadId]],
          headers: { 'content-length': String(len) },
          body: new Uint8Array(buf, 0, len),
        });
        await discard(r.body);
        const etag = r.headers.etag;
        if (typeof etag !== 'string') throw new Error('UploadPart answered without an ETag');
        this.#etags[index] = etag;
      })
      .catch((e: unknown) => {
        this.#failed ??= e;
      })
      .finally(() => {
        partBuffers.give(buf);
        this.#inFlight--;
        for (const w of this.#waiters.splice(0)) w();
        this.#listener?.();
      });
    this.#parts.push(part);
  }

  /** Makes the content visible; without `retire` an existing key is kept (one copy per oid) and `created` is false. */
  async complete(): Promise<UploadResult> {
    if (this.#done) throw this.#failed ?? new Error('upload already completed');
    try {
      if (this.#failed !== null) throw this.#failed;
      if (this.#uploadId === null) {
        if (!(await this.#mayWrite())) return { storedSize: this.#total, created: false };
        const body = this.#buf === null ? new Uint8Array(0) : new Uint8Array(this.#buf, 0, this.#fill);
        const payloadHash = createHash('sha256').update(body).digest('hex');
        const r = await this.#client.send({ method: 'PUT', key: this.#key, headers: { ...this.#headers, 'content-length': String(body.byteLength) }, body, payloadHash });
        await discard(r.body);
        return { storedSize: this.#total, created: true };
      }
      if (this.#fill > 0) this.#startPart();
      await Promise.all(this.#parts);
      if (this.#failed !== null) throw this.#failed;
      const uploadId = await this.#uploadId;
      if (!(await this.#mayWrite())) {
        await this.#abortUpload();
        return { storedSize: this.#total, created: false };
      }
      await this.#bucket.completeUpload(this.#key, uploadId, this.#etags);
      return { storedSize: this.#total, created: true };
    } catch (e) {
      // A failed finish leaves nothing either (types.ts ObjectWriter). When the bucket failed, the
      // abort goes on in the background: the client gets its 503 now.
      await Promise.all(this.#parts);
      const aborted = this.#abortUpload();
      if (!isOutage(e)) await aborted;
      throw e;
    } finally {
      this.#release();
      this.#done = true;
    }
  }

  async #mayWrite(): Promise<boolean> {
    if (this.#retire !== null) {
      await this.#retire();
      return true;
    }
    return (await this.#bucket.head(this.#key)) === null;
  }

  /** Aborts the multipart upload, if any; an unreachable bucket is retried in the background with growing pauses. Never rejects. */
  async #abortUpload(): Promise<void> {
    if (this.#uploadId === null) return;
    const uploadId = await this.#uploadId.catch(() => null);
    if (uploadId === null) return; // never created: nothing to abort
    try {
      await this.#bucket.abortUpload(this.#key, uploadId);
    } catch (e) {
      if (isOutage(e)) void this.#abortLater(uploadId);
    }
  }

  async #abortLater(uploadId: string): Promise<void> {
    for (const pause of ABORT_PAUSES_MS) {
      await new Promise((r) => setTimeout(r, pause).unref());
      try {
        return await this.#bucket.abortUpload(this.#key, uploadId);
      } catch (e) {
        if (!isOutage(e)) return; // refused, not unreachable: left to the sweep
      }
    }
  }

  #release(): void {
    if (this.#buf !== null) {
      partBuffers.give(this.#buf);
      this.#buf = null;
    }
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#release();
    if (this.#done) return;
    this.#done = true;
    await Promise.all(this.#parts);
    await this.#abortUpload();
  }
}

function isOutage(e: unknown): boolean {
  return (isLfsError(e) && e.code === 'LFS_ERR_NOT_READY') || isTransportError(e);
}

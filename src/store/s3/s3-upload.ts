import { createHash } from 'node:crypto';
import { lfsError } from '../../errors/errors.js';
import { BufferPool } from '../buffer-pool.js';
import { discard, type S3Client } from './s3-client.js';

/** Multipart part size: S3 wants ≥ 5 MiB for all parts but the last, and at most 10,000 parts. */
export const PART_SIZE = 8 << 20;
const MAX_PARTS = 10_000;
/** Parts uploading at once per object; writers pause their source beyond this (design.md rule 5). */
export const MAX_PARTS_IN_FLIGHT = 2;
/** Part buffers are reused across uploads; a few idle ones are kept. */
const partBuffers = new BufferPool(PART_SIZE, 6);

/** What a completed upload left in the bucket. */
export interface UploadResult {
  readonly storedSize: number;
  /** False when the key already existed (same content-addressed bytes) and this copy was dropped. */
  readonly created: boolean;
}

/**
 * Sequential bytes into one bucket key, never visible there until complete() (design.md rule 2):
 * - content that fits one part is held (at most PART_SIZE) and sent as a single PUT by complete(),
 *   signed with its sha256 so the bucket checks the bytes once more;
 * - larger content goes up as a multipart upload, parts of PART_SIZE from a small pool with at most
 *   MAX_PARTS_IN_FLIGHT uploading; parts stay invisible until CompleteMultipartUpload, which only
 *   complete() sends, and abort() aborts the upload.
 * Memory per upload is bounded by (MAX_PARTS_IN_FLIGHT + 1) × PART_SIZE, whatever the size.
 */
export class S3Upload {
  readonly #client: S3Client;
  readonly #key: string;
  readonly #headers: Readonly<Record<string, string>>;
  readonly #partSize: number;
  /** Size of the whole content when known and smaller than a part: the buffer is sized to it. */
  readonly #smallSize: number | null;
  #buf: ArrayBuffer | null = null;
  #fill = 0;
  #total = 0;
  #uploadId: Promise<string> | null = null;
  readonly #etags: string[] = [];
  readonly #parts: Promise<void>[] = [];
  #inFlight = 0;
  #listener: (() => void) | null = null;
  /** ready() callers waiting for a part to settle. */
  #waiters: (() => void)[] = [];
  #failed: unknown = null;
  #done = false;

  /** `headers`: sent with the PUT or CreateMultipartUpload (x-amz-meta-*); `expected`: stored size, if known. */
  constructor(client: S3Client, key: string, expected: number | null, headers: Readonly<Record<string, string>> = {}) {
    this.#client = client;
    this.#key = key;
    this.#headers = headers;
    // Keep within 10,000 parts for very large announced sizes (whole MiB, so S3 accepts them).
    this.#partSize = expected === null ? PART_SIZE : Math.max(PART_SIZE, Math.ceil(expected / (MAX_PARTS - 100) / (1 << 20)) * (1 << 20));
    this.#smallSize = expected !== null && expected < this.#partSize ? expected : null;
  }

  /** Parts uploading now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** The first failure of a part, if any. */
  get failed(): unknown {
    return this.#failed;
  }

  get total(): number {
    return this.#total;
  }

  /** Called each time a part settles (the caller checks inFlight and failed). */
  onSettle(listener: () => void): void {
    this.#listener = listener;
  }

  /** Resolves once fewer than MAX_PARTS_IN_FLIGHT parts are uploading, or one failed. */
  async ready(): Promise<void> {
    while (this.#inFlight >= MAX_PARTS_IN_FLIGHT && this.#failed === null) await new Promise<void>((resolve) => this.#waiters.push(resolve));
    if (this.#failed !== null) throw this.#failed;
  }

  #takeBuffer(): ArrayBuffer {
    // A small object of known size needs only its own bytes, not a whole pooled part.
    if (this.#etags.length === 0 && this.#smallSize !== null) return new ArrayBuffer(Math.max(1, this.#smallSize));
    return this.#partSize === PART_SIZE ? partBuffers.take() : new ArrayBuffer(this.#partSize);
  }

  /** Appends bytes (copied before returning); starts a part whenever one is full. */
  push(bytes: Uint8Array): void {
    if (this.#failed !== null) throw this.#failed;
    this.#total += bytes.byteLength;
    let off = 0;
    while (off < bytes.byteLength) {
      if (this.#buf !== null && this.#fill === this.#buf.byteLength && this.#buf.byteLength < this.#partSize) {
        // More than announced arrived into a right-sized buffer (framed overhead): grow to a part.
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

  /** Uploads the current buffer as the next part (creating the multipart upload on the first). */
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

  /** Makes the content visible under the key (unless the key already exists: content-addressed). */
  async complete(): Promise<UploadResult> {
    if (this.#failed !== null) throw this.#failed;
    try {
      if (this.#uploadId === null) {
        if (await this.#exists()) return { storedSize: this.#total, created: false };
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
      if (await this.#exists()) {
        // Already stored (another repository, or a concurrent upload): keep one copy.
        await this.#abortUpload();
        return { storedSize: this.#total, created: false };
      }
      const xml = `<CompleteMultipartUpload>${this.#etags.map((e, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${escapeXml(e)}</ETag></Part>`).join('')}</CompleteMultipartUpload>`;
      const r = await this.#client.sendText({ method: 'POST', key: this.#key, query: [['uploadId', uploadId]], headers: { 'content-type': 'application/xml' }, body: xml });
      // S3 may answer 200 and report the failure in the body (CompleteMultipartUpload docs).
      if (/<Error>/.test(r.text)) throw new Error(`CompleteMultipartUpload failed: ${/<Code>([^<]*)/.exec(r.text)?.[1] ?? r.text.slice(0, 200)}`);
      return { storedSize: this.#total, created: true };
    } finally {
      this.#release();
      this.#done = true;
    }
  }

  async #exists(): Promise<boolean> {
    const r = await this.#client.send({ method: 'HEAD', key: this.#key, accept: [404] });
    await discard(r.body);
    return r.status !== 404;
  }

  async #abortUpload(): Promise<void> {
    if (this.#uploadId === null) return;
    const uploadId = await this.#uploadId.catch(() => null);
    if (uploadId === null) return;
    const r = await this.#client.send({ method: 'DELETE', key: this.#key, query: [['uploadId', uploadId]], accept: [404] });
    await discard(r.body);
  }

  #release(): void {
    if (this.#buf !== null) {
      partBuffers.give(this.#buf);
      this.#buf = null;
    }
  }

  /** Gives up: the multipart upload (if any) is aborted, nothing becomes visible. Idempotent. */
  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#release();
    if (this.#done) return;
    this.#done = true;
    await Promise.all(this.#parts);
    // Best effort: an upload left behind (bucket unreachable now) is aborted by the sweep later.
    await this.#abortUpload().catch(() => undefined);
  }
}

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

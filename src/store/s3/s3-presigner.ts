import { createHash } from 'node:crypto';
import { lfsError } from '../../errors/errors.js';
import type { Oid } from '../../protocol/oid.js';
import type { Presigner, PutResult, SignedLink } from '../types.js';
import { isNotFound, type S3Bucket } from './s3-bucket.js';
import { discard, S3ResponseError, type S3Client } from './s3-client.js';
import type { S3Keys } from './s3-keys.js';
import { MAX_PRESIGN_SECONDS } from './sigv4.js';

/** Largest object one presigned PUT may carry (S3's single-PUT limit); larger ones are proxied. */
export const MAX_PRESIGNED_PUT = 5 * 1024 ** 3;

/** The S3 store's Presigner (docs/behaviour.md, "Object storage (S3)"): presigned GETs, PUTs to landing keys, and promotion once size and sha256 are confirmed. */
export class S3Presigner implements Presigner {
  readonly compressFrom = null;
  readonly maxPresignedPut = MAX_PRESIGNED_PUT;
  readonly maxExpiresIn = MAX_PRESIGN_SECONDS;
  readonly #client: S3Client;
  readonly #bucket: S3Bucket;
  readonly #keys: S3Keys;
  #checksumEnforced = false;

  constructor(client: S3Client, bucket: S3Bucket, keys: S3Keys) {
    this.#client = client;
    this.#bucket = bucket;
    this.#keys = keys;
  }

  get checksumEnforced(): boolean {
    return this.#checksumEnforced;
  }

  /** Start-up probe: does the bucket enforce `x-amz-checksum-sha256`? Some S3-compatible stores do not; then promotion hashes. Unreachable counts as no. */
  async probeChecksumEnforcement(): Promise<boolean> {
    const key = this.#keys.stagingOf('.checksum-probe');
    const wrong = createHash('sha256').update('not the body').digest('base64');
    try {
      const r = await this.#client.send({ method: 'PUT', key, headers: { 'content-length': '5', 'x-amz-checksum-sha256': wrong }, body: Buffer.from('probe') });
      await discard(r.body);
      await this.#bucket.delete(key).catch(() => undefined);
      this.#checksumEnforced = false;
    } catch (e) {
      this.#checksumEnforced = e instanceof S3ResponseError && e.status === 400;
    }
    return this.#checksumEnforced;
  }

  presignDownload(oid: Oid, expiresIn: number): SignedLink {
    const url = this.#client.presign('GET', this.#keys.object(oid), expiresIn);
    return { href: url.href, header: {}, expiresIn: url.expiresIn };
  }

  /** When the bucket enforces it, the expected sha256 is a signed header, so the bucket itself refuses other bytes. */
  presignUpload(repoKey: string, oid: Oid, expiresIn: number): SignedLink {
    const header: Record<string, string> = {};
    if (this.#checksumEnforced) header['x-amz-checksum-sha256'] = Buffer.from(oid, 'hex').toString('base64');
    const url = this.#client.presign('PUT', this.#keys.incomingOf(repoKey, oid), expiresIn, header);
    return { href: url.href, header, expiresIn: url.expiresIn };
  }

  async promoteIncoming(repoKey: string, oid: Oid, size: number): Promise<PutResult> {
    const incoming = this.#keys.incomingOf(repoKey, oid);
    const expectedB64 = Buffer.from(oid, 'hex').toString('base64');
    const head = await this.#bucket.head(incoming, this.#checksumEnforced ? { 'x-amz-checksum-mode': 'ENABLED' } : undefined);
    if (head === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
    if (head.size !== size) {
      await this.#bucket.delete(incoming);
      throw lfsError('LFS_ERR_SIZE_MISMATCH', `Uploaded object has ${head.size} bytes, not ${size}`);
    }
    const final = this.#keys.object(oid);
    if (this.#checksumEnforced && head.headers['x-amz-checksum-sha256'] === expectedB64) {
      // The bucket checked the bytes against the signed checksum on the way in.
      const created = (await this.#bucket.head(final)) === null;
      if (created) await this.#bucket.copy(incoming, final, size, {});
      await this.#bucket.delete(incoming);
      return { size, storedSize: size, created };
    }
    // Copy first to a key no link can write, then hash that copy: a presigned URL still valid cannot
    // swap the bytes between the check and the promotion.
    const staging = this.#keys.stagingOf(oid);
    try {
      await this.#bucket.copy(incoming, staging, size, {});
    } catch (e) {
      if (isNotFound(e)) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
      throw e;
    }
    await this.#bucket.delete(incoming);
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
      const created = (await this.#bucket.head(final)) === null;
      if (created) await this.#bucket.copy(staging, final, size, {});
      return { size, storedSize: size, created };
    } finally {
      await this.#bucket.delete(staging).catch(() => undefined);
    }
  }
}

import { fillFrom } from '../fill-from.js';
import type { Oid } from '../../protocol/oid.js';
import { IO_CHUNK } from '../buffer-pool.js';
import type { BlobReader, BlobStat, BlobStore, ObjectWriter, PartStore, StoredObject, WriterOptions } from '../types.js';
import { FORMAT_META, isNotFound, isPreconditionFailed, S3Bucket, SOURCE_ETAG_META, type KeyHead, type S3BucketOptions } from './s3-bucket.js';
import { discard, S3Client, type S3Location } from './s3-client.js';
import { S3Keys } from './s3-keys.js';
import { S3Presigner } from './s3-presigner.js';
import { S3ChunkSource } from './s3-reader.js';
import { S3Upload } from './s3-upload.js';
import { S3Writer } from './s3-writer.js';

export { MAX_PRESIGNED_PUT } from './s3-presigner.js';

/** Where the store lives (SVC_S3_*), plus listing and copy sizes (S3's own limits by default). */
export interface S3StoreOptions extends S3Location, S3BucketOptions {
  /** Key prefix inside the bucket: '' or ending with '/'. */
  readonly prefix: string;
}

/** Litter younger than this is never swept: other nodes share the bucket, presigned uploads may be in progress. */
export const MIN_SWEEP_AGE_MS = 6 * 3600_000;

/** Attempts at putting the current version aside when the key changes between HEAD and copy. */
const TRASH_ATTEMPTS = 3;

/**
 * The BlobStore backend in an S3-compatible bucket (layout: S3Keys, docs/s3.md). Writes stream to
 * the final key as one PUT or a multipart upload only finish() completes. Deleting or replacing a key
 * first copies its version to trash, so readers opened before keep reading it (S3ChunkSource).
 */
export class S3BlobStore implements BlobStore {
  readonly kind = 's3';
  /** Part buffers copy whatever arrives; 1 MiB blocks keep the layers above on their usual size. */
  readonly blockSize = IO_CHUNK;
  readonly legacy = null;
  /** No journal over a bucket: an acknowledged object must be in the bucket, not on one node's disk. */
  readonly journal = null;
  readonly presigner: S3Presigner;
  readonly #client: S3Client;
  readonly #bucket: S3Bucket;
  readonly #keys: S3Keys;

  private constructor(client: S3Client, options: S3StoreOptions) {
    this.#client = client;
    this.#bucket = new S3Bucket(client, options);
    this.#keys = new S3Keys(options.prefix);
    this.presigner = new S3Presigner(client, this.#bucket, this.#keys);
  }

  /** No I/O: a bucket that is down at start makes /ready fail, not the process. */
  static open(options: S3StoreOptions): S3BlobStore {
    return new S3BlobStore(new S3Client(options), options);
  }

  /** Partial resumable uploads' parts, under `uploads/` (no object name, no listing of objects sees them). */
  partStore(): PartStore {
    const folder = `${this.#keys.prefix}uploads/`;
    const client = this.#client;
    const bucket = this.#bucket;
    return {
      async put(name, part, bytes) {
        const r = await client.send({ method: 'PUT', key: `${folder}${name}/${part}`, body: bytes, headers: { 'content-type': 'application/octet-stream' } });
        await discard(r.body);
      },
      async read(name, part) {
        return (await client.send({ method: 'GET', key: `${folder}${name}/${part}` })).body;
      },
      async removeAll(name) {
        for await (const k of bucket.list(`${folder}${name}/`)) await bucket.delete(k.key);
      },
    };
  }

  keyOf(oid: Oid): string {
    return this.#keys.object(oid);
  }

  async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const headers: Record<string, string> = options.framed === true ? { [FORMAT_META.name]: FORMAT_META.value } : {};
    const retire = options.replace === true ? async () => void (await this.#toTrash(oid)) : undefined;
    return new S3Writer(new S3Upload(this.#client, this.#bucket, this.#keys.object(oid), options.expectedSize, { headers, retire }));
  }

  async open(oid: Oid): Promise<BlobReader | null> {
    const key = this.#keys.object(oid);
    const head = await this.#bucket.head(key);
    if (head === null) return null;
    const target = { key, fallbackKey: this.#keys.trashOf(oid), etag: head.etag };
    return {
      size: head.size,
      storedSize: head.size,
      framed: head.framed,
      read: (start, end) => new S3ChunkSource(this.#client, target, start, end),
      readAt: (into, position) => fillFrom(new S3ChunkSource(this.#client, target, position, position + into.byteLength - 1), into),
      close: async () => undefined,
    };
  }

  async stat(oid: Oid): Promise<BlobStat | null> {
    const head = await this.#bucket.head(this.#keys.object(oid));
    return head === null ? null : { size: head.size, storedSize: head.size, framed: head.framed };
  }

  async delete(oid: Oid): Promise<boolean> {
    if (!(await this.#toTrash(oid))) return false;
    await this.#bucket.delete(this.#keys.object(oid));
    return true;
  }

  /** Copies the current version to trash tagged with its ETag (`x-amz-copy-source-if-match`); false: no key. */
  async #toTrash(oid: Oid): Promise<boolean> {
    const key = this.#keys.object(oid);
    for (let attempt = 1; ; attempt++) {
      const head = await this.#bucket.head(key);
      if (head === null) return false;
      const metadata: Record<string, string> = { ...formatMeta(head) };
      if (head.etag !== null) metadata[SOURCE_ETAG_META] = head.etag;
      try {
        await this.#bucket.copy(key, this.#keys.trashOf(oid), head.size, metadata, head.etag);
        return true;
      } catch (e) {
        if (isNotFound(e)) return false;
        // 412: the key changed between HEAD and copy; put the new version aside instead.
        if (!isPreconditionFailed(e) || attempt >= TRASH_ATTEMPTS) throw e;
      }
    }
  }

  async *list(): AsyncIterable<StoredObject> {
    for await (const k of this.#bucket.list(this.#keys.objects)) {
      const oid = this.#keys.oidOfObjectKey(k.key);
      // Keys that are not `ab/cd/<oid>` (copied in by hand, another tool's) are not objects of this store.
      if (oid !== null && Number.isSafeInteger(k.size)) yield { oid, storedSize: k.size };
    }
  }

  /** Copies to `{prefix}quarantine/<oid>.<ms>`, then deletes through the trash as delete() does. */
  async quarantine(oid: Oid): Promise<boolean> {
    const key = this.#keys.object(oid);
    const head = await this.#bucket.head(key);
    if (head === null) return false;
    try {
      await this.#bucket.copy(key, this.#keys.quarantineOf(oid, Date.now()), head.size, formatMeta(head));
    } catch (e) {
      if (isNotFound(e)) return false;
      throw e;
    }
    await this.delete(oid);
    return true;
  }

  /**
   * Litter: incomplete multipart uploads, unverified landing keys, staging and trash. Nothing younger
   * than MIN_SWEEP_AGE_MS whatever is asked (a trash copy must outlive the reads falling back on it).
   */
  async sweepStaging(maxAgeMs: number): Promise<number> {
    const cutoff = Date.now() - Math.max(maxAgeMs, MIN_SWEEP_AGE_MS);
    // Uploads of our folders only: with an empty prefix the bucket may hold other software's uploads.
    const ours = [this.#keys.objects, this.#keys.trash, this.#keys.quarantine, this.#keys.staging, this.#keys.incoming];
    let removed = 0;
    try {
      for await (const u of this.#bucket.listUploads(this.#keys.prefix)) {
        if (!ours.some((p) => u.key.startsWith(p)) || !(u.initiatedMs <= cutoff)) continue;
        await this.#bucket.abortUpload(u.key, u.uploadId);
        removed++;
      }
    } catch {
      // Not every S3-compatible store lists multipart uploads; a bucket lifecycle rule covers them there.
    }
    for (const dir of [this.#keys.incoming, this.#keys.staging, this.#keys.trash]) {
      try {
        for await (const k of this.#bucket.list(dir)) {
          if (!(k.lastModifiedMs <= cutoff)) continue;
          await this.#bucket.delete(k.key);
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
    const key = this.#keys.stagingOf('.ready');
    const r = await this.#client.send({ method: 'PUT', key, headers: { 'content-length': '2' }, body: Buffer.from('ok') });
    await discard(r.body);
    await this.#bucket.delete(key);
  }

  /** See S3Presigner.probeChecksumEnforcement (start-up, presign mode). */
  async probeChecksumEnforcement(): Promise<boolean> {
    return this.presigner.probeChecksumEnforcement();
  }

  async close(): Promise<void> {
    await this.#client.close();
  }
}

function formatMeta(head: KeyHead): Record<string, string> {
  return head.framed ? { [FORMAT_META.name]: FORMAT_META.value } : {};
}

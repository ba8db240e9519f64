import { discard, S3ResponseError, type S3Client } from './s3-client.js';

/** Object metadata marking framed bytes (WriterOptions.framed): readers need not probe for a trailer. */
export const FORMAT_META = { name: 'x-amz-meta-stowage-format', value: 'frames-v1' } as const;

/** A trash copy's metadata: the ETag the copied key had, so a reader falls back to it only for the version it opened. */
export const SOURCE_ETAG_META = 'x-amz-meta-stowage-etag';

/** S3's largest CopyObject and largest part of UploadPartCopy (CopyObject API reference). */
export const MAX_COPY_SIZE = 5 * 1024 ** 3;
const MAX_PARTS = 10_000;

export interface KeyHead {
  readonly size: number;
  /** Without quotes; null when the store sends none. */
  readonly etag: string | null;
  readonly framed: boolean;
}

export interface ListedKey {
  readonly key: string;
  readonly size: number;
  readonly lastModifiedMs: number;
}

export interface ListedUpload {
  readonly key: string;
  readonly uploadId: string;
  readonly initiatedMs: number;
}

/** Sizes of listings and copies; S3's own limits unless a test or a stricter store asks for less. */
export interface S3BucketOptions {
  /** Keys per ListObjectsV2 page (S3 returns at most 1000). */
  readonly listPageSize?: number;
  /** Objects larger than this are copied part by part (UploadPartCopy); at most MAX_COPY_SIZE. */
  readonly copyPartSize?: number;
}

/** Key-level bucket operations shared by the store, the presigner and the sweep. */
export class S3Bucket {
  readonly #client: S3Client;
  readonly #pageSize: number;
  readonly #copyPartSize: number;

  constructor(client: S3Client, options: S3BucketOptions = {}) {
    this.#client = client;
    this.#pageSize = options.listPageSize ?? 1000;
    this.#copyPartSize = Math.min(options.copyPartSize ?? MAX_COPY_SIZE, MAX_COPY_SIZE);
  }

  async head(key: string, headers?: Record<string, string>): Promise<(KeyHead & { readonly headers: Record<string, string | string[] | undefined> }) | null> {
    const r = await this.#client.send({ method: 'HEAD', key, accept: [404], headers });
    await discard(r.body);
    if (r.status === 404) return null;
    return { size: Number(r.headers['content-length']), etag: etagOf(r.headers.etag), framed: r.headers[FORMAT_META.name] === FORMAT_META.value, headers: r.headers };
  }

  /** Deleting a key that is not there is no error (S3 answers 204 either way). */
  async delete(key: string): Promise<void> {
    const r = await this.#client.send({ method: 'DELETE', key, accept: [404] });
    await discard(r.body);
  }

  /** Server-side copy with exactly `metadata`; with `ifMatch`, only of that version (404 when gone, 412 when another). */
  async copy(from: string, to: string, size: number, metadata: Readonly<Record<string, string>>, ifMatch: string | null = null): Promise<void> {
    const source: Record<string, string> = { 'x-amz-copy-source': `/${this.#client.bucket}/${from.split('/').map(encodeURIComponent).join('/')}` };
    if (ifMatch !== null) source['x-amz-copy-source-if-match'] = `"${ifMatch}"`;
    if (size <= this.#copyPartSize) {
      const r = await this.#client.sendText({ method: 'PUT', key: to, headers: { ...source, 'x-amz-metadata-directive': 'REPLACE', ...metadata } });
      // CopyObject may answer 200 and carry the failure in the body (CopyObject API reference).
      throwIfError(r.text, 'CopyObject');
      return;
    }
    const partSize = Math.max(this.#copyPartSize, Math.ceil(size / MAX_PARTS));
    const created = await this.#client.sendText({ method: 'POST', key: to, query: [['uploads', '']], headers: { ...metadata } });
    const uploadId = /<UploadId>([^<]+)<\/UploadId>/.exec(created.text)?.[1];
    if (uploadId === undefined) throw new Error('CreateMultipartUpload answered without an UploadId');
    try {
      const etags: string[] = [];
      for (let at = 0, n = 1; at < size; at += partSize, n++) {
        const end = Math.min(size, at + partSize) - 1;
        const r = await this.#client.sendText({
          method: 'PUT',
          key: to,
          query: [['partNumber', String(n)], ['uploadId', uploadId]],
          headers: { ...source, 'x-amz-copy-source-range': `bytes=${at}-${end}` },
        });
        throwIfError(r.text, 'UploadPartCopy');
        const etag = /<ETag>([^<]+)<\/ETag>/.exec(r.text)?.[1];
        if (etag === undefined) throw new Error('UploadPartCopy answered without an ETag');
        etags.push(unescapeXml(etag));
      }
      await this.completeUpload(to, uploadId, etags);
    } catch (e) {
      await this.abortUpload(to, uploadId).catch(() => undefined);
      throw e;
    }
  }

  async completeUpload(key: string, uploadId: string, etags: readonly string[]): Promise<void> {
    const xml = `<CompleteMultipartUpload>${etags.map((e, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${escapeXml(e)}</ETag></Part>`).join('')}</CompleteMultipartUpload>`;
    const r = await this.#client.sendText({ method: 'POST', key, query: [['uploadId', uploadId]], headers: { 'content-type': 'application/xml' }, body: xml });
    // S3 may answer 200 and report the failure in the body (CompleteMultipartUpload API reference).
    throwIfError(r.text, 'CompleteMultipartUpload');
  }

  async abortUpload(key: string, uploadId: string): Promise<void> {
    const r = await this.#client.send({ method: 'DELETE', key, query: [['uploadId', uploadId]], accept: [404] });
    await discard(r.body);
  }

  /** Every key under `prefix`, page by page: memory per page only. */
  async *list(prefix: string): AsyncGenerator<ListedKey> {
    let token: string | null = null;
    do {
      const query: [string, string][] = [['list-type', '2'], ['max-keys', String(this.#pageSize)], ['prefix', prefix]];
      if (token !== null) query.push(['continuation-token', token]);
      const r = await this.#client.sendText({ method: 'GET', key: '', query });
      for (const m of r.text.matchAll(/<Contents>([\s\S]*?)<\/Contents>/g)) {
        const key = tag(m[1]!, 'Key');
        if (key === null) continue;
        yield { key, size: Number(tag(m[1]!, 'Size') ?? NaN), lastModifiedMs: Date.parse(tag(m[1]!, 'LastModified') ?? '') };
      }
      token = tag(r.text, 'IsTruncated') === 'true' ? tag(r.text, 'NextContinuationToken') : null;
    } while (token !== null);
  }

  async *listUploads(prefix: string): AsyncGenerator<ListedUpload> {
    let markers: [string, string] | null = null;
    do {
      const query: [string, string][] = [['uploads', ''], ['prefix', prefix]];
      if (markers !== null) query.push(['key-marker', markers[0]], ['upload-id-marker', markers[1]]);
      const r = await this.#client.sendText({ method: 'GET', key: '', query });
      for (const m of r.text.matchAll(/<Upload>([\s\S]*?)<\/Upload>/g)) {
        const key = tag(m[1]!, 'Key');
        const uploadId = tag(m[1]!, 'UploadId');
        if (key === null || uploadId === null) continue;
        yield { key, uploadId, initiatedMs: Date.parse(tag(m[1]!, 'Initiated') ?? '') };
      }
      const nextKey = tag(r.text, 'NextKeyMarker');
      const nextId = tag(r.text, 'NextUploadIdMarker');
      markers = tag(r.text, 'IsTruncated') === 'true' && nextKey !== null && nextId !== null ? [nextKey, nextId] : null;
    } while (markers !== null);
  }
}

export function isNotFound(e: unknown): boolean {
  return e instanceof S3ResponseError && e.status === 404;
}

export function isPreconditionFailed(e: unknown): boolean {
  return e instanceof S3ResponseError && e.status === 412;
}

function etagOf(value: string | string[] | undefined): string | null {
  return typeof value === 'string' ? value.replace(/"/g, '') : null;
}

function tag(xml: string, name: string): string | null {
  const v = new RegExp(`<${name}>([^<]*)</${name}>`).exec(xml)?.[1];
  return v === undefined ? null : unescapeXml(v);
}

function throwIfError(text: string, operation: string): void {
  if (/<Error>/.test(text)) throw new Error(`${operation} failed: ${/<Code>([^<]*)/.exec(text)?.[1] ?? text.slice(0, 200)}`);
}

function unescapeXml(s: string): string {
  return s.replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
}

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

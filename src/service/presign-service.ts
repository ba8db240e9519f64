import { createHmac, timingSafeEqual } from 'node:crypto';
import { lfsError } from '../errors/errors.js';
import type { BatchAction, BatchResponseObject } from '../protocol/batch.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { Presigner } from '../store/types.js';
import type { PutResult } from '../store/types.js';

/** Slowest transfer a link's lifetime is sized for (1 MiB/s). */
const MIN_RATE_BYTES_PER_SECOND = 1 << 20;

export interface PresignOptions {
  readonly ttl: number;
  /** Key of the verify links' HMAC; derived from the bucket secret, so every node sharing the bucket agrees. */
  readonly verifyKey: Buffer;
}

/**
 * SVC_S3_PRESIGN=true (docs/behaviour.md, "Object storage (S3)"): batch links straight to the bucket.
 * `authenticated` covers the verify action too (https://github.com/git-lfs/git-lfs/blob/v3.3.0/tq/verify.go),
 * so the verify link is HMAC-signed over repository, oid, size and expiry; a bad one is 403, never
 * 401, on which the client would retry forever. Large or compressed objects are proxied (null).
 */
export class PresignService {
  readonly #store: Presigner;
  readonly #ttl: number;
  readonly #verifyKey: Buffer;

  constructor(store: Presigner, options: PresignOptions) {
    this.#store = store;
    this.#ttl = options.ttl;
    this.#verifyKey = options.verifyKey;
  }

  expiresIn(size: number): number {
    return Math.min(this.#store.maxExpiresIn, this.#ttl + Math.ceil(size / MIN_RATE_BYTES_PER_SECOND));
  }

  /** The download entry, a presigned GET; null for an object stored compressed, which only the server can decode. */
  download(oid: Oid, size: number, storedSize: number): BatchResponseObject | null {
    if (storedSize !== size) return null;
    const link = this.#store.presignDownload(oid, this.expiresIn(size));
    // The link's own life: shorter than asked when the bucket credentials expire sooner (it dies with them).
    return { oid, size, authenticated: true, actions: { download: action(link.href, link.header, link.expiresIn) } };
  }

  /** The upload entry: a presigned PUT to this repository's landing key and a signed verify link; null to proxy. */
  upload(repo: RepoName, oid: Oid, size: number, verifyBase: string): BatchResponseObject | null {
    if (size > this.#store.maxPresignedPut) return null;
    const compressFrom = this.#store.compressFrom;
    if (compressFrom !== null && size >= compressFrom) return null;
    const link = this.#store.presignUpload(repo.key, oid, this.expiresIn(size));
    const expires = link.expiresIn;
    const verifyExpires = Math.min(this.#store.maxExpiresIn, 2 * expires);
    const until = Math.floor(Date.now() / 1000) + verifyExpires;
    const sig = this.#sign(repo, oid, size, until);
    const verifyHref = `${verifyBase}/verify?oid=${oid}&size=${size}&expires=${until}&signature=${sig}`;
    return {
      oid,
      size,
      authenticated: true,
      actions: { upload: action(link.href, link.header, expires), verify: action(verifyHref, {}, verifyExpires) },
    };
  }

  #sign(repo: RepoName, oid: string, size: number, until: number): string {
    return createHmac('sha256', this.#verifyKey).update(`verify\n${repo.key}\n${oid}\n${size}\n${until}`).digest('hex');
  }

  isSignedVerify(query: string): boolean {
    return new URLSearchParams(query).has('signature');
  }

  checkVerifyLink(repo: RepoName, query: string, oid: Oid, size: number): void {
    const q = new URLSearchParams(query);
    const until = Number(q.get('expires'));
    const given = Buffer.from(q.get('signature') ?? '', 'hex');
    const want = Buffer.from(this.#sign(repo, oid, size, until), 'hex');
    const ok = q.get('oid') === oid && q.get('size') === String(size) && given.length === want.length && timingSafeEqual(given, want);
    if (!ok) throw lfsError('LFS_ERR_FORBIDDEN', 'This verify link is not valid for this object');
    if (!(until * 1000 > Date.now())) throw lfsError('LFS_ERR_FORBIDDEN', 'This verify link has expired; the client asks for a new one');
  }

  promote(repo: RepoName, oid: Oid, size: number): Promise<PutResult> {
    return this.#store.promoteIncoming(repo.key, oid, size);
  }
}

function action(href: string, header: Readonly<Record<string, string>>, expiresIn: number): BatchAction {
  // `expires_in` must be a JSON integer (git-lfs decodes it as an int: https://github.com/git-lfs/git-lfs/blob/v3.3.0/tq/transfer.go).
  return Object.keys(header).length > 0 ? { href, header: { ...header }, expires_in: expiresIn } : { href, expires_in: expiresIn };
}

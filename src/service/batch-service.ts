import type { ObjectIndex, ObjectRow } from '../db/index-types.js';
import type { Oid } from '../protocol/oid.js';
import type { BatchRequest, BatchResponse, BatchResponseObject } from '../protocol/batch.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { DownloadGrants } from './download-grants.js';
import type { PresignService } from './presign-service.js';
import type { UploadBudget, UploadLimits } from './settings-service.js';
import { RESERVE_MESSAGE, type DiskReserve } from '../store/disk-reserve.js';
import type { LegacyLayout } from '../store/types.js';

export interface BatchLinks {
  /** Public base URL, no trailing slash (set once the listener is bound when derived from the port). */
  baseUrl: string;
  /** Objects of this size or more are asked to upload chunked. */
  readonly chunkedUploadThreshold: number;
}

/** What a batch answer consults besides the index; each absent part is simply not consulted. */
export interface BatchParts {
  /** Access settings: max object size and repository quota. */
  readonly limits?: UploadLimits | null;
  /** The legacy per-repository layout: its objects count as present until dedupe folds them. */
  readonly legacy?: Pick<LegacyLayout, 'legacySizeSync'> | null;
  /** Presigned bucket links (docs/behaviour.md, "Object storage (S3)"). */
  readonly presign?: PresignService | null;
  /** Records each download a batch answer links to this server. */
  readonly grants?: DownloadGrants | null;
  /** Lets the store get ready for announced uploads (a hash thread that is not up starts while the client reads the answer). */
  readonly uploadAhead?: ((size: number) => void) | null;
  /** Uploads that would take the disk into its reserve get a 507 entry instead of an action. */
  readonly reserve?: DiskReserve | null;
  /** Resumable uploads (SVC_TUS_PORT): offered to clients that offer tus; null: every upload is basic. */
  readonly tus?: TusLinks | null;
}

/** Where a batch sends the tus uploads it offers, and who is told of them. */
export interface TusLinks {
  /** Base URL of the tus listener (no trailing slash), known once it listens. */
  baseUrl(): string;
  /** The upload of `oid` to `repo` may begin at its first HEAD or PATCH (ResumableUploads.announce). */
  announce(repo: RepoName, oid: Oid, size: number): void | Promise<void>;
}

/** Header carrying the announced size on a chunked upload, which has no Content-Length. */
export const EXPECTED_SIZE_HEADER = 'X-Lfs-Object-Size';

/**
 * One entry per requested object, in request order, with actions or an error (git-lfs hangs on a
 * missing entry). Presence is per repository (proof of possession): an oid stored by another
 * repository is invisible here, so the client uploads it and proves it holds the bytes.
 */
export class BatchService {
  readonly #objects: ObjectIndex;
  readonly #links: BatchLinks;
  readonly #limits: UploadLimits | null;
  /** The legacy per-repository layout: its objects count as present until dedupe folds them. */
  readonly #legacy: Pick<LegacyLayout, 'legacySizeSync'> | null;
  readonly #presign: PresignService | null;
  readonly #grants: DownloadGrants | null;
  readonly #uploadAhead: ((size: number) => void) | null;
  readonly #reserve: DiskReserve | null;
  readonly #tus: TusLinks | null;

  constructor(objects: ObjectIndex, links: BatchLinks, parts: BatchParts = {}) {
    this.#objects = objects;
    this.#links = links;
    this.#limits = parts.limits ?? null;
    this.#legacy = parts.legacy ?? null;
    this.#presign = parts.presign ?? null;
    this.#grants = parts.grants ?? null;
    this.#uploadAhead = parts.uploadAhead ?? null;
    this.#reserve = parts.reserve ?? null;
    this.#tus = parts.tus ?? null;
  }

  async answer(repo: RepoName, req: BatchRequest): Promise<BatchResponse> {
    const base = `${this.#links.baseUrl}/${repo.org}/${repo.repo}/objects`;
    const budget = req.operation === 'upload' ? ((await this.#limits?.uploadBudget(repo)) ?? null) : null;
    // One index query for the whole batch (a round trip each would cost a cluster node dearly).
    const valid = req.objects.flatMap((o) => (o.invalid === undefined && o.parsedOid !== null ? [o.parsedOid] : []));
    const found = await this.#objects.findManyInRepo(repo.key, valid);
    const objects: BatchResponseObject[] = [];
    // The batch's uploads are admitted together: what the entries before asked counts for the next.
    const room = { asked: 0 };
    const tus = req.operation === 'upload' && req.offersTus ? this.#tus : null;
    for (const o of req.objects) objects.push(await this.#answerOne(repo, req, o, base, found, budget, room, tus));
    // Links back to this server are never `authenticated: true`, so the client sends credentials.
    return { transfer: tus === null ? 'basic' : 'tus', objects, hash_algo: 'sha256' };
  }

  async #answerOne(
    repo: RepoName,
    req: BatchRequest,
    o: BatchRequest['objects'][number],
    base: string,
    found: ReadonlyMap<Oid, ObjectRow>,
    budget: UploadBudget | null,
    room: { asked: number },
    tus: TusLinks | null,
  ): Promise<BatchResponseObject> {
    if (o.invalid !== undefined || o.parsedOid === null) {
      return { oid: o.oid, size: o.size, error: { code: 422, message: o.invalid ?? 'invalid object' } };
    }
    if (req.hashAlgo !== 'sha256') {
      // batch.md: 409 — the hash algorithm disagrees with the server's acceptable options.
      return { oid: o.oid, size: o.size, error: { code: 409, message: `hash_algo "${req.hashAlgo}" is not supported; this server uses sha256` } };
    }
    const row = found.get(o.parsedOid) ?? null;
    let held: { size: number } | null = row;
    if (held === null && this.#legacy !== null) {
      // The legacy file first (a cached "no legacy folder" for most repositories): the index is
      // asked about quarantine only for a file that exists, not once per new object of a push.
      const size = this.#legacy.legacySizeSync(repo, o.parsedOid);
      if (size !== null && !(await this.#objects.isQuarantined(o.parsedOid))) held = { size };
    }
    if (held !== null && held.size !== o.size) {
      return { oid: o.oid, size: o.size, error: { code: 422, message: `size ${o.size} does not match the stored object's size` } };
    }
    if (req.operation === 'download') {
      if (held === null) return { oid: o.oid, size: o.size, error: { code: 404, message: 'Object does not exist' } };
      // A presigned GET of the shared key, authenticated: true (the URL carries its credentials).
      if (this.#presign !== null) {
        const signed = row === null ? null : this.#presign.download(o.parsedOid, row.size, row.storedSize);
        if (signed !== null) return signed;
      }
      // Held in the shared store (a legacy file is not: its GET asks the index and the legacy layout).
      if (row !== null) this.#grants?.grant(repo.key, o.parsedOid);
      return { oid: o.oid, size: o.size, actions: { download: { href: `${base}/${o.oid}` } } };
    }
    if (held !== null) return { oid: o.oid, size: o.size };
    // An over-size object gets 422, one past the quota 507, each in its own entry.
    const refusal = budget?.admit(o.size) ?? null;
    if (refusal !== null) return { oid: o.oid, size: o.size, error: refusal };
    if (this.#reserve !== null) {
      if (!this.#reserve.admits(room.asked + o.size, false)) return { oid: o.oid, size: o.size, error: { code: 507, message: RESERVE_MESSAGE } };
      room.asked += o.size;
    }
    if (tus !== null) {
      // The same href for every push of the oid; verify serves a client whose last answer was lost.
      await tus.announce(repo, o.parsedOid, o.size);
      return {
        oid: o.oid,
        size: o.size,
        actions: {
          upload: { href: `${tus.baseUrl()}/${repo.org}/${repo.repo}/objects/tus/${o.oid}` },
          verify: { href: `${base}/verify` },
        },
      };
    }
    // A presigned PUT (null: over 5 GiB, proxied through this server with ordinary links).
    const signed = this.#presign?.upload(repo, o.parsedOid, o.size, base) ?? null;
    if (signed !== null) return signed;
    const header: Record<string, string> = {};
    if (o.size >= this.#links.chunkedUploadThreshold) {
      // The uWS build in front resets a Content-Length of 10+ digits; git-lfs sends chunked when the
      // action says so (https://github.com/git-lfs/git-lfs/blob/v3.3.0/tq/basic_upload.go).
      header['Transfer-Encoding'] = 'chunked';
      header[EXPECTED_SIZE_HEADER] = String(o.size);
    }
    this.#uploadAhead?.(o.size);
    // No verify action: a PUT answers 200 only once the bytes are checked and durable, so verify
    // would cost a round trip per object to learn nothing. The endpoint still answers.
    return {
      oid: o.oid,
      size: o.size,
      actions: { upload: Object.keys(header).length > 0 ? { href: `${base}/${o.oid}`, header } : { href: `${base}/${o.oid}` } },
    };
  }
}

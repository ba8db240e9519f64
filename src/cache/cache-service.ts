import { lfsError } from '../errors/errors.js';
import { CHALLENGE } from '../service/access-service.js';
import { reserveReached } from '../store/disk-reserve.js';
import type { BatchRequest, BatchResponseObject } from '../protocol/batch.js';
import { parseOid, type Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { BlobReader, BlobStore, ChunkSource, ObjectWriter } from '../store/types.js';
import type { CacheLedger } from './cache-ledger.js';
import type { FillCoordinator } from './fill-coordinator.js';
import { credentialDigest, type CheckedLink, type LinkOperation, type LinkSigner } from './link-signer.js';
import type { UpstreamAction, UpstreamAnswer, UpstreamClient } from './upstream-client.js';

/** A link lives at most this long, and never longer than the upstream's own action. */
const LINK_TTL_MS = 3600_000;
/** Header carrying the announced size on a chunked upload (as BatchService's links). */
const EXPECTED_SIZE_HEADER = 'X-Lfs-Object-Size';
/** The sha256 of no bytes: the object a read-permission probe asks about. */
const EMPTY_OID = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

/** What the cache tells the metrics of each download. */
export interface CacheEvents {
  hit(repo: RepoName): void;
  miss(repo: RepoName): void;
}

export interface CacheParts {
  readonly upstream: UpstreamClient;
  readonly links: LinkSigner;
  readonly ledger: CacheLedger;
  readonly fills: FillCoordinator;
  /** The cache's objects: verified writes, plain reads (DiskBlobStore under the verify layer). */
  readonly store: BlobStore;
  readonly events: CacheEvents;
  /** Public base URL of the cache, no trailing slash. */
  readonly baseUrl: () => string;
  readonly chunkedUploadThreshold: number;
  readonly now?: () => number;
}

/** An object to send: from the cache's store, or following a fill from the upstream. */
export interface DownloadSource {
  readonly size: number;
  /** Bytes [start, end]. */
  open(start: number, end: number): Promise<ChunkSource>;
  readonly source: 'cache' | 'upstream';
  close(): Promise<void>;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** An action of the upstream's answer, or null when it is not one. */
function actionOf(v: unknown): (UpstreamAction & { expiresAt: number | null }) | null {
  if (!isRecord(v) || typeof v.href !== 'string' || !/^https?:\/\//.test(v.href)) return null;
  const header: Record<string, string> = {};
  if (isRecord(v.header)) for (const [k, value] of Object.entries(v.header)) if (typeof value === 'string') header[k] = value;
  let expiresAt: number | null = null;
  if (typeof v.expires_in === 'number' && Number.isFinite(v.expires_in)) expiresAt = Date.now() + v.expires_in * 1000;
  if (typeof v.expires_at === 'string') {
    const t = Date.parse(v.expires_at);
    if (Number.isFinite(t)) expiresAt = expiresAt === null ? t : Math.min(expiresAt, t);
  }
  return { href: v.href, header, expiresAt };
}

/**
 * Cache mode (docs/cache.md): every batch is the upstream's decision, relayed with the client's
 * credentials; each object it grants gets a link to this cache bound to the repository, the oid, its
 * size, the client's credentials and an expiry. Downloads come from the cache or are filled from
 * the upstream; uploads are written through to the upstream before they are acknowledged.
 */
export class CacheService {
  readonly #p: CacheParts;
  readonly #now: () => number;

  constructor(parts: CacheParts) {
    this.#p = parts;
    this.#now = parts.now ?? Date.now;
  }

  /** The upstream's refusal as it came, or the batch answer with links to this cache. */
  async batch(repo: RepoName, req: BatchRequest, authorization: string, signal?: AbortSignal): Promise<UpstreamAnswer> {
    // Rebuilt from what was parsed: nothing else of the client's body reaches the upstream.
    const sent = {
      operation: req.operation,
      transfers: ['basic'],
      objects: req.objects.map((o) => ({ oid: o.oid, size: o.size })),
      hash_algo: req.hashAlgo,
      ...(req.refName === null ? {} : { ref: { name: req.refName } }),
    };
    const answer = await this.#p.upstream.json('POST', repo, '/objects/batch', { authorization }, sent, signal);
    if (answer.status !== 200) return answer;
    const body = answer.body;
    if (!isRecord(body) || !Array.isArray(body.objects)) throw lfsError('LFS_ERR_UPSTREAM_FAILED', 'The upstream answered the batch without an objects list');
    if (body.transfer !== undefined && body.transfer !== 'basic') throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream chose the transfer "${String(body.transfer)}"; the cache speaks basic`);
    const asked = new Map<string, number>(req.objects.map((o) => [o.oid, o.size]));
    const credential = credentialDigest(authorization);
    const objects: BatchResponseObject[] = [];
    for (const o of body.objects as unknown[]) {
      if (!isRecord(o)) continue;
      const oid = parseOid(o.oid);
      // Only what the client asked, at the size it asked, gets a link.
      if (oid === null || !asked.has(oid) || o.size !== asked.get(oid)) continue;
      const size = o.size as number;
      objects.push(this.#answerOne(repo, req.operation, oid, size, o, credential));
      asked.delete(oid);
    }
    // git-lfs waits for an entry per object it asked about: one the upstream left out gets an error.
    for (const [oid, size] of asked) objects.push({ oid, size, error: { code: 502, message: 'The upstream gave no answer for this object' } });
    return { status: 200, body: { transfer: 'basic', objects, hash_algo: 'sha256' }, headers: {} };
  }

  #answerOne(repo: RepoName, op: LinkOperation, oid: Oid, size: number, o: Record<string, unknown>, credential: string): BatchResponseObject {
    if (isRecord(o.error)) {
      const code = typeof o.error.code === 'number' ? o.error.code : 500;
      return { oid, size, error: { code, message: typeof o.error.message === 'string' ? o.error.message.slice(0, 1000) : 'refused by the upstream' } };
    }
    const actions = isRecord(o.actions) ? o.actions : {};
    const transfer = actionOf(op === 'download' ? actions.download : actions.upload);
    // An upload without actions: the upstream has the object already, and the client skips it.
    if (transfer === null) {
      if (op === 'upload') return { oid, size };
      return { oid, size, error: { code: 502, message: 'The upstream granted no download action' } };
    }
    const verify = op === 'upload' ? actionOf(actions.verify) : null;
    const now = this.#now();
    const expiresAt = Math.min(now + LINK_TTL_MS, transfer.expiresAt ?? Infinity, verify?.expiresAt ?? Infinity);
    const query = this.#p.links.issue({ op, repo: repo.key, oid, size, credential, expiresAt }, { transfer, verify, authenticated: o.authenticated === true });
    const href = `${this.#p.baseUrl()}/${repo.org}/${repo.repo}/objects/${oid}?${query}`;
    const action: { href: string; header?: Record<string, string>; expires_in: number } = { href, expires_in: Math.max(0, Math.floor((expiresAt - now) / 1000)) };
    if (op === 'upload' && size >= this.#p.chunkedUploadThreshold) action.header = { 'Transfer-Encoding': 'chunked', [EXPECTED_SIZE_HEADER]: String(size) };
    return { oid, size, actions: op === 'download' ? { download: action } : { upload: action } };
  }

  /**
   * Whether the upstream lets this credential read `repo`: a download batch for the empty object,
   * which asks exactly what a clone would. Null when it does; else its refusal as it came.
   */
  async mayRead(repo: RepoName, authorization: string, signal?: AbortSignal): Promise<UpstreamAnswer | null> {
    const probe = { operation: 'download', transfers: ['basic'], objects: [{ oid: EMPTY_OID, size: 0 }], hash_algo: 'sha256' };
    const answer = await this.#p.upstream.json('POST', repo, '/objects/batch', { authorization }, probe, signal);
    return answer.status === 200 ? null : answer;
  }

  /** The size a HEAD of a download link answers with: the link's, checked against the cached copy. */
  headSize(link: CheckedLink, oid: Oid): number {
    const cached = this.#p.ledger.sizeOf(oid);
    if (cached === null && link.upstream === null) throw lfsError('LFS_ERR_LINK_REFUSED');
    return link.size;
  }

  /**
   * Checks a transfer link against the request it came with (LFS_ERR_LINK_REFUSED otherwise). A link
   * issued to credentials and used without any is answered 401 with a challenge: git-lfs sends a
   * transfer without credentials first and adds them only when asked.
   */
  check(op: LinkOperation, repo: RepoName, oid: Oid, query: string, authorization: string): CheckedLink {
    // Not `use`: a refused request must not keep an object from eviction.
    const cached = op === 'download' ? this.#p.ledger.sizeOf(oid) : null;
    try {
      return this.#p.links.check(query, { op, repo: repo.key, oid, credential: credentialDigest(authorization) }, cached);
    } catch (e) {
      if (authorization === '') throw lfsError('LFS_ERR_AUTH_REQUIRED', undefined, CHALLENGE);
      throw e;
    }
  }

  /** What a download link serves: the cached copy, or the upstream's bytes as they arrive. */
  async download(repo: RepoName, oid: Oid, link: CheckedLink, authorization: string): Promise<DownloadSource> {
    const cached = this.#p.ledger.use(oid);
    if (cached !== null) {
      const unpin = this.#p.ledger.pin(oid);
      let reader: BlobReader | null = null;
      try {
        reader = await this.#p.store.open(oid);
      } catch {
        reader = null;
      }
      if (reader !== null) {
        this.#p.events.hit(repo);
        const r = reader;
        return {
          size: r.size,
          source: 'cache',
          open: async (start, end) => r.read(start, end),
          close: async () => {
            unpin();
            await r.close();
          },
        };
      }
      unpin();
    }
    if (link.upstream === null) throw lfsError('LFS_ERR_LINK_REFUSED');
    this.#p.events.miss(repo);
    const action = withCredentials(link.upstream.transfer, link.upstream.authenticated, authorization);
    return {
      size: link.size,
      source: 'upstream',
      open: (start, end) => this.#p.fills.follow(oid, link.size, action, start, end),
      close: async () => undefined,
    };
  }

  /**
   * Takes an upload into the cache's store (verified as any PUT), sends it to the upstream's upload
   * action and verify action, and only then keeps it: nothing is acknowledged that the upstream lacks.
   */
  async upload(oid: Oid, link: CheckedLink, authorization: string, feed: (writer: ObjectWriter) => Promise<void>): Promise<void> {
    if (link.upstream === null) throw lfsError('LFS_ERR_LINK_REFUSED');
    const { authenticated } = link.upstream;
    const transfer = withCredentials(link.upstream.transfer, authenticated, authorization);
    const verify = link.upstream.verify === null ? null : withCredentials(link.upstream.verify, authenticated, authorization);
    // Larger than the whole cache: written through from a staged copy that is not kept.
    const keep = link.size <= this.#p.ledger.maxSize;
    const room = keep ? await this.#p.ledger.promise(link.size) : await this.#p.ledger.passThrough(link.size);
    if (room === null) throw reserveReached();
    const unpin = this.#p.ledger.pin(oid);
    const held = this.#p.ledger.use(oid) !== null;
    try {
      const writer = await this.#p.store.createWriter(oid, { expectedSize: link.size });
      try {
        await feed(writer);
        await writer.finish();
      } catch (e) {
        await writer.abort();
        throw e;
      }
      const reader = await this.#p.store.open(oid);
      if (reader === null) throw lfsError('LFS_ERR_NOT_READY');
      try {
        await this.#p.upstream.upload(transfer, link.size, chunksOf(reader));
      } catch (e) {
        if (!held) await this.#p.store.delete(oid).catch(() => false);
        throw e;
      } finally {
        await reader.close();
      }
      if (verify !== null) {
        try {
          await this.#p.upstream.verify(verify, oid, link.size);
        } catch (e) {
          if (!held) await this.#p.store.delete(oid).catch(() => false);
          throw e;
        }
      }
      if (keep) this.#p.ledger.add(oid, link.size);
      else if (!held) await this.#p.store.delete(oid).catch(() => false);
    } finally {
      room();
      unpin();
    }
  }
}

/**
 * The action as the client would send it: with its own Authorization unless the upstream said the
 * action carries its credentials (`authenticated`) or its headers name one.
 */
function withCredentials(action: UpstreamAction, authenticated: boolean, authorization: string): UpstreamAction {
  if (authenticated || authorization === '' || Object.keys(action.header).some((k) => k.toLowerCase() === 'authorization')) return action;
  return { href: action.href, header: { ...action.header, Authorization: authorization } };
}

/** A reader's bytes as an async iterable, copied per chunk (the reader reuses its buffers). */
async function* chunksOf(reader: BlobReader): AsyncGenerator<Uint8Array> {
  if (reader.size === 0) return;
  const source = reader.read(0, reader.size - 1);
  try {
    for (;;) {
      const chunk = await source.next();
      if (chunk === null) return;
      yield Buffer.from(chunk);
    }
  } finally {
    await source.close();
  }
}

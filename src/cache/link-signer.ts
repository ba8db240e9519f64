import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { UpstreamAction } from './upstream-client.js';

export type LinkOperation = 'download' | 'upload';

/** What a link was issued for; every field is bound by its signature. */
export interface LinkGrant {
  readonly op: LinkOperation;
  /** The repository's key (RepoName.key). */
  readonly repo: string;
  readonly oid: Oid;
  readonly size: number;
  /** credentialDigest of the Authorization the batch came with. */
  readonly credential: string;
  /** Ms since the epoch. */
  readonly expiresAt: number;
}

/** The upstream's own actions behind one link, kept in memory for the link's life only. */
export interface UpstreamActions {
  readonly transfer: UpstreamAction;
  readonly verify: UpstreamAction | null;
  /**
   * The upstream said `authenticated: true`: its actions carry their own credentials. Otherwise the
   * client's credentials go with them, as a client would send them (batch.md), taken from the
   * request that uses the link: the cache holds none of its own.
   */
  readonly authenticated: boolean;
}

/** A link that passed its checks: its size, and the upstream's actions while they are still held. */
export interface CheckedLink {
  readonly size: number;
  /** Null once forgotten (a restart with SVC_CACHE_LINK_SECRET): the object is served only if cached. */
  readonly upstream: UpstreamActions | null;
}

/** The digest a link is bound to: of the whole Authorization header, never kept or logged raw. */
export function credentialDigest(authorization: string): string {
  return createHash('sha256').update(authorization, 'latin1').digest('base64url');
}

/** Held actions past this count make the oldest expire first (a bound on memory, whatever clients ask). */
const MAX_HELD = 200_000;

/**
 * Signs and checks the transfer links the cache hands out (docs/cache.md, "Security"). A link is
 * `?l=<id>.<expiry>.<signature>`: the HMAC over its id, operation, repository, oid, size, expiry and
 * the digest of the credentials it was issued to. The request's own path and Authorization supply
 * all but the id and expiry, so a link replayed for another repository or object, with other
 * credentials or after its expiry fails its signature or its clock check. The upstream's actions
 * (whose links and headers may carry credentials) are held under the id until the link expires.
 */
export class LinkSigner {
  readonly #key: Buffer;
  readonly #now: () => number;
  readonly #held = new Map<string, { readonly actions: UpstreamActions; readonly size: number; readonly expiresAt: number }>();

  /** `secret`: SVC_CACHE_LINK_SECRET, or null for a random key of this process. `now`: a clock tests move. */
  constructor(secret: string | null, now: () => number = Date.now) {
    this.#key = secret === null ? randomBytes(32) : createHash('sha256').update(`stowage cache links\0${secret}`).digest();
    this.#now = now;
  }

  /** The query (without '?') of a link granting `grant`; the upstream's actions are held until it expires. */
  issue(grant: LinkGrant, actions: UpstreamActions): string {
    this.#sweep();
    const id = randomBytes(12).toString('base64url');
    this.#held.set(id, { actions, size: grant.size, expiresAt: grant.expiresAt });
    return `l=${id}.${grant.expiresAt}.${this.#sign(id, grant)}`;
  }

  /**
   * Checks the link in `query` against what the request is for; throws LFS_ERR_LINK_REFUSED when it
   * was not issued for exactly that, or has expired. `cachedSize`: the size of the copy the cache
   * holds, which a link whose actions were forgotten (a restart with SVC_CACHE_LINK_SECRET) is
   * checked against; null when the cache holds none.
   */
  check(query: string, want: Omit<LinkGrant, 'size' | 'expiresAt'>, cachedSize: number | null): CheckedLink {
    const m = /(?:^|&)l=([A-Za-z0-9_-]{16})\.(\d{1,15})\.([A-Za-z0-9_-]{43})(?:&|$)/.exec(query);
    if (m === null) throw lfsError('LFS_ERR_LINK_REFUSED');
    const id = m[1]!;
    const expiresAt = Number(m[2]!);
    const held = this.#held.get(id);
    const size = held?.size ?? cachedSize;
    if (size === null) throw lfsError('LFS_ERR_LINK_REFUSED');
    const expected = Buffer.from(this.#sign(id, { ...want, size, expiresAt }), 'base64url');
    const given = Buffer.from(m[3]!, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw lfsError('LFS_ERR_LINK_REFUSED');
    if (this.#now() >= expiresAt) throw lfsError('LFS_ERR_LINK_REFUSED');
    return { size, upstream: held?.actions ?? null };
  }

  #sign(id: string, g: LinkGrant): string {
    return createHmac('sha256', this.#key).update(`${id}\n${g.op}\n${g.repo}\n${g.oid}\n${g.size}\n${g.expiresAt}\n${g.credential}`).digest('base64url');
  }

  /** Forgets expired actions (and the oldest past MAX_HELD): they were only for their links' lives. */
  #sweep(): void {
    const now = this.#now();
    for (const [id, h] of this.#held) {
      if (h.expiresAt > now && this.#held.size < MAX_HELD) break;
      this.#held.delete(id);
    }
  }
}

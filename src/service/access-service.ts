import { createHash } from 'node:crypto';
import { isLfsError, lfsError } from '../errors/errors.js';
import type { ForgeAdapter, ForgeAnswer, Identity, Permissions } from '../forge/types.js';
import type { Metrics } from '../metrics/registry.js';
import type { RepoName } from '../protocol/repo-name.js';

export type Need = 'pull' | 'push' | 'admin';

export interface Grant {
  readonly permissions: Permissions;
}

export interface AccessOptions {
  readonly cacheTtl: number; // seconds
  readonly rejectionTtl: number; // seconds
  readonly lookupBudget: number; // per minute
  readonly cacheEntries: number;
}

/** The challenge that makes git-lfs ask its credential helper (../shared/git-lfs-client.md (b)). */
export const CHALLENGE = { 'LFS-Authenticate': 'Basic realm="Stowage"', 'WWW-Authenticate': 'Basic realm="Stowage"' };

interface CacheEntry {
  readonly answer: ForgeAnswer;
  readonly expiresAt: number;
}

/**
 * Token → permissions on one repository, asked of the forge and cached (spec Authentication rules
 * 5–8): granted answers for cacheTtl, refusals for the shorter rejectionTtl, failures never. Keys are
 * sha256 of the token, so no raw token is kept; the cache is a bounded LRU so a spray of random
 * tokens cannot grow memory. Concurrent misses for the same key share one forge lookup, and misses
 * are capped by a server-wide budget per minute.
 */
export class AccessService {
  readonly #forge: ForgeAdapter;
  readonly #opts: AccessOptions;
  readonly #metrics: Metrics;
  readonly #cache = new Map<string, CacheEntry>();
  readonly #inFlight = new Map<string, Promise<ForgeAnswer>>();
  readonly #identities = new Map<string, { identity: Identity | null; expiresAt: number }>();
  /** Times (ms) of the uncached lookups of the last minute, oldest first. */
  readonly #lookupTimes: number[] = [];

  constructor(forge: ForgeAdapter, opts: AccessOptions, metrics: Metrics) {
    this.#forge = forge;
    this.#opts = opts;
    this.#metrics = metrics;
  }

  /** Resolves with the grant when `token` may do `need` on `repo`; otherwise throws the LfsError to answer. */
  async authorize(token: string | null, repo: RepoName, need: Need, signal: AbortSignal): Promise<Grant> {
    if (token === null) throw lfsError('LFS_ERR_AUTH_REQUIRED', undefined, CHALLENGE);
    const answer = await this.#answer(token, repo, signal);
    if (answer.kind === 'bad_token') throw lfsError('LFS_ERR_AUTH_REJECTED', undefined, CHALLENGE);
    if (answer.kind === 'no_access' || !answer.permissions.pull) throw lfsError('LFS_ERR_REPO_NOT_FOUND');
    const p = answer.permissions;
    if (need === 'push' && !p.push) throw lfsError('LFS_ERR_FORBIDDEN_WRITE');
    if (need === 'admin' && !p.admin) throw lfsError('LFS_ERR_FORBIDDEN', 'This needs admin permission on the repository');
    return { permissions: p };
  }

  /**
   * Who is behind a token (lock ownership). Resolved from the forge's user endpoint once per token
   * and cached for the grant TTL under the token's hash; null when the forge names nobody.
   */
  async identify(token: string, signal: AbortSignal): Promise<Identity | null> {
    const key = createHash('sha256').update(token).digest('base64url');
    const hit = this.#identities.get(key);
    if (hit !== undefined && hit.expiresAt > Date.now()) return hit.identity;
    this.#spendBudget(Date.now());
    const identity = await this.#forge.identify(token, signal);
    this.#identities.set(key, { identity, expiresAt: Date.now() + this.#opts.cacheTtl * 1000 });
    while (this.#identities.size > this.#opts.cacheEntries) this.#identities.delete(this.#identities.keys().next().value as string);
    return identity;
  }

  async #answer(token: string, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer> {
    const key = `${createHash('sha256').update(token).digest('base64url')}\0${repo.key}`;
    const now = Date.now();
    const hit = this.#cache.get(key);
    if (hit !== undefined) {
      if (hit.expiresAt > now) {
        // LRU: re-insert so the entry moves to the young end.
        this.#cache.delete(key);
        this.#cache.set(key, hit);
        this.#metrics.authCacheHits.inc({ kind: hit.answer.kind === 'granted' ? 'granted' : 'refused' });
        return hit.answer;
      }
      this.#cache.delete(key);
    }
    const pending = this.#inFlight.get(key);
    if (pending !== undefined) return pending;

    this.#spendBudget(now);
    const lookup = this.#lookup(token, repo, signal, key).finally(() => this.#inFlight.delete(key));
    this.#inFlight.set(key, lookup);
    return lookup;
  }

  async #lookup(token: string, repo: RepoName, signal: AbortSignal, key: string): Promise<ForgeAnswer> {
    let answer: ForgeAnswer;
    try {
      answer = await this.#forge.lookup(token, repo, signal);
    } catch (e) {
      const code = isLfsError(e) ? e.code : 'LFS_ERR_FORGE_UNREACHABLE';
      const cause = code === 'LFS_ERR_FORGE_RATE_LIMITED' ? 'forge_rate_limited' : 'forge_unreachable';
      this.#metrics.forgeLookups.inc({ result: cause });
      this.#metrics.rejections.inc({ cause });
      throw isLfsError(e) ? e : lfsError('LFS_ERR_FORGE_UNREACHABLE', undefined);
    }
    this.#metrics.forgeLookups.inc({ result: answer.kind });
    const ttl = answer.kind === 'granted' && answer.permissions.pull ? this.#opts.cacheTtl : this.#opts.rejectionTtl;
    if (ttl > 0) this.#remember(key, { answer, expiresAt: Date.now() + ttl * 1000 });
    return answer;
  }

  #remember(key: string, entry: CacheEntry): void {
    this.#cache.set(key, entry);
    while (this.#cache.size > this.#opts.cacheEntries) {
      this.#cache.delete(this.#cache.keys().next().value as string);
    }
  }

  /** Spec rule 8: past the budget the caller gets 503 with a Retry-After of our own; it lifts as the minute slides. */
  #spendBudget(now: number): void {
    const windowStart = now - 60_000;
    while (this.#lookupTimes.length > 0 && this.#lookupTimes[0]! <= windowStart) this.#lookupTimes.shift();
    if (this.#lookupTimes.length >= this.#opts.lookupBudget) {
      const retry = Math.max(1, Math.ceil((this.#lookupTimes[0]! + 60_000 - now) / 1000));
      this.#metrics.rejections.inc({ cause: 'lookup_budget_spent' });
      throw lfsError('LFS_ERR_LOOKUP_BUDGET_SPENT', undefined, { 'Retry-After': String(retry) });
    }
    this.#lookupTimes.push(now);
  }
}

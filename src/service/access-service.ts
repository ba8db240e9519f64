import { hash } from 'node:crypto';
import type { SettingGuard } from '../db/index-types.js';
import { isLfsError, lfsError } from '../errors/errors.js';
import type { LookupBudget } from '../forge/budget.js';
import type { ForgeAdapter, ForgeAnswer, Identity, Permissions } from '../forge/types.js';
import type { Metrics } from '../metrics/registry.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import { MAX_TOKEN_BYTES, isPlausibleToken } from '../protocol/token.js';

export type Need = 'pull' | 'push' | 'admin';

/** The saved settings an upload was admitted by (UploadCommit.setting), and how to judge it again when they changed. */
export interface UploadJudge {
  readonly setting: SettingGuard;
  /** Judged again by the settings saved now, at its real size: throws the refusal, or returns the new guard. */
  rejudge(size: number): Promise<SettingGuard>;
}

export interface Grant {
  readonly permissions: Permissions;
  /** True when no token was sent and the repository is public : read only. */
  readonly anonymous: boolean;
}

export interface AccessOptions {
  readonly cacheTtl: number; // seconds
  readonly rejectionTtl: number; // seconds
  readonly cacheEntries: number;
  /** The server-wide forge budget (SVC_AUTH_LOOKUP_BUDGET), read only to skip optional calls when spent. */
  readonly budget?: LookupBudget | null;
  /** Resolve who is behind each token once per cacheTtl, for request lines; skipped when the budget is spent. */
  readonly identifyCallers?: boolean;
  readonly now?: () => number;
}

/** The challenge that makes git-lfs ask its credential helper (it reads LFS-Authenticate and WWW-Authenticate: https://github.com/git-lfs/git-lfs/blob/v3.3.0/lfsapi/auth.go). */
export const CHALLENGE = { 'LFS-Authenticate': 'Basic realm="Stowage"', 'WWW-Authenticate': 'Basic realm="Stowage"' };

/** The key under which anonymous answers are cached, per repository (docs/behaviour.md, "Anonymous read and app identity"). Not a possible sha256. */
const ANONYMOUS = 'anonymous';

/** In place of a repository in a cache key: a token the forge refused is bad for every repository. */
const ANY_REPOSITORY = '*';


/** Refuses, before any cache or forge call, a token no forge could have issued: junk costs neither forge calls nor cache entries. */
function checkPlausible(token: string): void {
  if (!isPlausibleToken(token)) {
    throw lfsError('LFS_ERR_AUTH_MALFORMED', `These credentials cannot be a forge token: empty, longer than ${MAX_TOKEN_BYTES} bytes, or not visible ASCII`, CHALLENGE);
  }
}

interface CacheEntry<T> {
  readonly value: T;
  readonly expiresAt: number;
}

/** A bounded LRU with per-entry expiry, so random tokens sprayed by an attacker evict old entries instead of growing memory. */
class BoundedCache<T> {
  readonly #map = new Map<string, CacheEntry<T>>();
  readonly #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  get(key: string, now: number): CacheEntry<T> | undefined {
    const hit = this.#map.get(key);
    if (hit === undefined) return undefined;
    this.#map.delete(key);
    if (hit.expiresAt <= now) return undefined;
    this.#map.set(key, hit);
    return hit;
  }

  /** Without touching recency: a read for logs must not keep an entry alive. */
  peek(key: string, now: number): CacheEntry<T> | undefined {
    const hit = this.#map.get(key);
    return hit === undefined || hit.expiresAt <= now ? undefined : hit;
  }

  set(key: string, value: T, expiresAt: number): void {
    this.#map.delete(key);
    this.#map.set(key, { value, expiresAt });
    while (this.#map.size > this.#max) this.#map.delete(this.#map.keys().next().value as string);
  }
}

/** Who is asking: a request context (its `signal` made only when read), or `{ signal }`. */
export interface Caller {
  readonly signal: AbortSignal;
}

function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/**
 * Token → permissions on one repository, cached (docs/behaviour.md, "Caches and budget"): grants for
 * cacheTtl, refusals for rejectionTtl, failures never; keyed by the token's sha256. Concurrent misses
 * share one lookup, detached so a caller hanging up does not fail the others.
 */
export class AccessService {
  readonly #forge: ForgeAdapter;
  readonly #opts: AccessOptions;
  readonly #metrics: Metrics;
  readonly #answers: BoundedCache<ForgeAnswer>;
  readonly #identities: BoundedCache<Identity | null>;
  readonly #inFlight = new Map<string, Promise<ForgeAnswer>>();
  readonly #identifying = new Map<string, Promise<Identity | null>>();
  readonly #detached = new AbortController().signal;
  readonly #now: () => number;

  constructor(forge: ForgeAdapter, opts: AccessOptions, metrics: Metrics) {
    this.#forge = forge;
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#metrics = metrics;
    this.#answers = new BoundedCache(opts.cacheEntries);
    this.#identities = new BoundedCache(opts.cacheEntries);
  }

  /** authorize for an upload; null here, PolicedAccessService returns the judge its reference statement holds it to. */
  async authorizeUpload(token: string | null, repo: RepoName, _oid: Oid, caller: Caller): Promise<UploadJudge | null> {
    await this.authorize(token, repo, 'push', caller);
    return null;
  }

  /** The grant, or throws the LfsError to answer; without a token only a public repository reads, anything else gets a 401 challenge, so private looks like missing. */
  async authorize(token: string | null, repo: RepoName, need: Need, caller: Caller): Promise<Grant> {
    if (token !== null) checkPlausible(token);
    const answer = await this.#answer(token, repo, caller);
    if (token === null) {
      if (answer.kind === 'granted' && answer.permissions.pull && need === 'pull') return { permissions: answer.permissions, anonymous: true };
      throw lfsError('LFS_ERR_AUTH_REQUIRED', undefined, CHALLENGE);
    }
    if (answer.kind === 'bad_token') throw lfsError('LFS_ERR_AUTH_REJECTED', undefined, CHALLENGE);
    if (answer.kind === 'no_access' || !answer.permissions.pull) throw lfsError('LFS_ERR_REPO_NOT_FOUND');
    const p = answer.permissions;
    if (need === 'push' && !p.push) throw lfsError('LFS_ERR_FORBIDDEN_WRITE');
    if (need === 'admin' && !p.admin) throw lfsError('LFS_ERR_FORBIDDEN', 'This needs admin permission on the repository');
    if (this.#opts.identifyCallers === true) await this.#identifyForLog(token, caller.signal);
    return { permissions: p, anonymous: false };
  }

  /**
   * authorize's grant when the token's cached answer allows `need`; null whenever authorize would have
   * to wait, refuse or count. For the small GET answered in line.
   */
  authorizedInLine(token: string | null, repo: RepoName, need: Need): Grant | null {
    if (token === null || token.length > MAX_TOKEN_BYTES) return null;
    const hashed = hashToken(token);
    const now = this.#now();
    if (this.#opts.identifyCallers === true && this.#identities.peek(hashed, now) === undefined) return null;
    const hit = this.#answers.get(`${hashed}\0${repo.key}`, now);
    if (hit === undefined || hit.value.kind !== 'granted') return null;
    const p = hit.value.permissions;
    if (!p.pull || (need === 'push' && !p.push) || (need === 'admin' && !p.admin)) return null;
    this.#metrics.authCacheHits.inc({ kind: 'granted' });
    return { permissions: p, anonymous: false };
  }

  /** The forge user id behind `token` when already cached; never asks the forge. For request lines. */
  knownUserId(token: string): string | null {
    return this.#identities.peek(hashToken(token), this.#now())?.value?.id ?? null;
  }

  async #identifyForLog(token: string, signal: AbortSignal): Promise<void> {
    const now = this.#now();
    if (this.#identities.peek(hashToken(token), now) !== undefined || this.#opts.budget?.left(now) === false) return;
    await this.identify(token, signal).catch(() => null);
  }

  /** Who is behind a token (lock ownership), from the forge's user endpoint, cached per token hash; null when nobody. */
  async identify(token: string, signal: AbortSignal): Promise<Identity | null> {
    checkPlausible(token);
    const key = hashToken(token);
    const hit = this.#identities.get(key, this.#now());
    if (hit !== undefined) {
      this.#metrics.authCacheHits.inc({ kind: 'identity' });
      return hit.value;
    }
    this.#metrics.authCacheMisses.inc({ kind: 'identity' });
    let pending = this.#identifying.get(key);
    if (pending === undefined) {
      pending = this.#forge.identify(token, this.#detached).then((identity) => {
        this.#identities.set(key, identity, this.#now() + this.#opts.cacheTtl * 1000);
        return identity;
      }, (e: unknown) => {
        throw this.#countFailure(e);
      }).finally(() => this.#identifying.delete(key));
      this.#identifying.set(key, pending);
      pending.catch(() => undefined); // every waiter may have hung up: never an unhandled rejection
    }
    return untilAborted(pending, signal);
  }

  async #answer(token: string | null, repo: RepoName, caller: Caller): Promise<ForgeAnswer> {
    const hashed = token === null ? ANONYMOUS : hashToken(token);
    const key = `${hashed}\0${repo.key}`;
    const now = this.#now();
    const hit = (token === null ? undefined : this.#answers.get(`${hashed}\0${ANY_REPOSITORY}`, now)) ?? this.#answers.get(key, now);
    if (hit !== undefined) {
      this.#metrics.authCacheHits.inc({ kind: hit.value.kind === 'granted' ? 'granted' : 'refused' });
      return hit.value;
    }
    this.#metrics.authCacheMisses.inc({ kind: 'access' });
    let pending = this.#inFlight.get(key);
    if (pending === undefined) {
      pending = this.#lookup(token, repo, key).finally(() => this.#inFlight.delete(key));
      this.#inFlight.set(key, pending);
      pending.catch(() => undefined); // every waiter may have hung up: never an unhandled rejection
    }
    return untilAborted(pending, caller.signal);
  }

  async #lookup(token: string | null, repo: RepoName, key: string): Promise<ForgeAnswer> {
    let answer: ForgeAnswer;
    try {
      answer = await this.#forge.lookup(token, repo, this.#detached);
    } catch (e) {
      // Neither an outage nor a rate limit is remembered; the next request asks again.
      throw this.#countFailure(e);
    }
    this.#metrics.forgeLookups.inc({ result: answer.kind });
    const granted = answer.kind === 'granted' && answer.permissions.pull;
    const ttl = granted ? this.#opts.cacheTtl : this.#opts.rejectionTtl;
    if (ttl > 0) {
      this.#answers.set(key, answer, this.#now() + ttl * 1000);
      // Unknown to the forge: refused for every repository for rejectionTtl, so a junk-token flood
      // costs one call per token, not per repository.
      if (answer.kind === 'bad_token' && answer.everywhere === true && token !== null) this.#answers.set(`${key.slice(0, key.indexOf('\0'))}\0${ANY_REPOSITORY}`, answer, this.#now() + ttl * 1000);
    }
    return answer;
  }

  #countFailure(e: unknown): Error {
    if (isLfsError(e) && e.code === 'LFS_ERR_LOOKUP_BUDGET_SPENT') {
      // Refused by our own budget: the forge was not asked.
      this.#metrics.rejections.inc({ cause: 'lookup_budget_spent' });
      return e;
    }
    const limited = isLfsError(e) && e.code === 'LFS_ERR_FORGE_RATE_LIMITED';
    const cause = limited ? 'forge_rate_limited' : 'forge_unreachable';
    this.#metrics.forgeLookups.inc({ result: cause });
    this.#metrics.rejections.inc({ cause });
    return isLfsError(e) ? e : lfsError('LFS_ERR_FORGE_UNREACHABLE');
  }
}

/** A token's cache key: its sha256, one-shot. */
function hashToken(token: string): string {
  return hash('sha256', token, 'base64url');
}

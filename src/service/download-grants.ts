import type { Oid } from '../protocol/oid.js';

/** How long a batch answer's download stays granted: git-lfs GETs a batch's objects right after it. */
export const GRANT_MS = 10_000;
/** Grants held at most (the oldest go first); past it a GET simply asks the index. */
export const GRANTS_MAX = 4096;

/**
 * Downloads a batch answer just granted, so their GETs skip the index: one GET each, lapsing after
 * GRANT_MS. Another node's drop of a reference is seen once the grant lapses, as with a presigned link.
 */
export class DownloadGrants {
  /** oid → repository → until (ms on `now`'s clock); the Map's order is the order granted. */
  readonly #grants = new Map<Oid, Map<string, number>>();
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #now: () => number;
  #count = 0;

  constructor(options: { ttlMs?: number; max?: number; now?: () => number } = {}) {
    this.#ttlMs = options.ttlMs ?? GRANT_MS;
    this.#max = options.max ?? GRANTS_MAX;
    this.#now = options.now ?? (() => performance.now());
  }

  get size(): number {
    return this.#count;
  }

  grant(repo: string, oid: Oid): void {
    let repos = this.#grants.get(oid);
    if (repos === undefined) repos = new Map();
    else this.#grants.delete(oid); // newest last
    this.#grants.set(oid, repos);
    if (!repos.has(repo)) this.#count++;
    repos.set(repo, this.#now() + this.#ttlMs);
    while (this.#count > this.#max) {
      const [oldest, held] = this.#grants.entries().next().value as [Oid, Map<string, number>];
      this.#grants.delete(oldest);
      this.#count -= held.size;
    }
  }

  /** True when `repo` holds a live grant for `oid`; the grant stays. */
  has(repo: string, oid: Oid): boolean {
    const until = this.#grants.get(oid)?.get(repo);
    return until !== undefined && until > this.#now();
  }

  /** True when `repo` holds a live grant for `oid`; the grant is used up either way. */
  take(repo: string, oid: Oid): boolean {
    const repos = this.#grants.get(oid);
    const until = repos?.get(repo);
    if (repos === undefined || until === undefined) return false;
    repos.delete(repo);
    this.#count--;
    if (repos.size === 0) this.#grants.delete(oid);
    return until > this.#now();
  }

  withdraw(oid: Oid): void {
    const repos = this.#grants.get(oid);
    if (repos === undefined) return;
    this.#grants.delete(oid);
    this.#count -= repos.size;
  }
}

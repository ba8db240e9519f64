import { lfsError } from '../errors/errors.js';

const WINDOW_MS = 60_000;

/**
 * The one server-wide ceiling on forge calls per minute (SVC_AUTH_LOOKUP_BUDGET; docs/behaviour.md, "Caches and budget").
 * Every HTTP call to the forge spends from it: repository lookups, user lookups, GitLab's `/job`,
 * the GitHub App's installation lookups and token mints. It is spent by ForgeHttpClient where the
 * calls are made, so no adapter can make a call it does not count. A sliding minute: the times of
 * the calls in it, oldest first, at most `limit` long.
 */
export class LookupBudget {
  readonly limit: number;
  readonly #times: number[] = [];
  /** The clock the minute slides on (ms since the epoch); Date.now unless a test moves it. */
  readonly #now: () => number;

  constructor(limit: number, now: () => number = Date.now) {
    this.limit = limit;
    this.#now = now;
  }

  #slide(now: number): void {
    const windowStart = now - WINDOW_MS;
    while (this.#times.length > 0 && this.#times[0]! <= windowStart) this.#times.shift();
  }

  /** Calls spent in the minute up to `now`. */
  used(now: number = this.#now()): number {
    this.#slide(now);
    return this.#times.length;
  }

  /** True when one more call fits (nothing is spent). */
  left(now: number = this.#now()): boolean {
    return this.used(now) < this.limit;
  }

  /**
   * Spends one call, or throws 503 LFS_ERR_LOOKUP_BUDGET_SPENT with a Retry-After of our own: when
   * the oldest call in the window leaves it, one more fits.
   */
  spend(now: number = this.#now()): void {
    this.#slide(now);
    if (this.#times.length >= this.limit) {
      const retry = Math.max(1, Math.ceil((this.#times[0]! + WINDOW_MS - now) / 1000));
      throw lfsError('LFS_ERR_LOOKUP_BUDGET_SPENT', undefined, { 'Retry-After': String(retry) });
    }
    this.#times.push(now);
  }
}

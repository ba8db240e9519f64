import { lfsError } from '../errors/errors.js';

const WINDOW_MS = 60_000;

/**
 * The server-wide ceiling on forge calls per minute (SVC_AUTH_LOOKUP_BUDGET; docs/behaviour.md,
 * "Caches and budget"), spent in ForgeHttpClient so no adapter can make a call it does not count.
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

  used(now: number = this.#now()): number {
    this.#slide(now);
    return this.#times.length;
  }

  left(now: number = this.#now()): boolean {
    return this.used(now) < this.limit;
  }

  /** Spends one call, or throws 503 LFS_ERR_LOOKUP_BUDGET_SPENT with Retry-After until the oldest call leaves the window. */
  spend(now: number = this.#now()): void {
    this.#slide(now);
    if (this.#times.length >= this.limit) {
      const retry = Math.max(1, Math.ceil((this.#times[0]! + WINDOW_MS - now) / 1000));
      throw lfsError('LFS_ERR_LOOKUP_BUDGET_SPENT', undefined, { 'Retry-After': String(retry) });
    }
    this.#times.push(now);
  }
}

/** A costly value (SQLite aggregates) kept for `maxAgeMs` and refreshed single-flight; a failed read is not cached. */
export class CachedFigures<T> {
  readonly #read: () => T | Promise<T>;
  readonly #maxAgeMs: number;
  readonly #now: () => number;
  #value: { at: number; figures: T } | null = null;
  #pending: Promise<T> | null = null;

  constructor(read: () => T | Promise<T>, maxAgeMs: number, now: () => number = Date.now) {
    this.#read = read;
    this.#maxAgeMs = maxAgeMs;
    this.#now = now;
  }

  /** The cached figures while fresh; otherwise the one refresh in flight (started if none is). */
  get(): Promise<T> {
    const cached = this.#value;
    if (cached !== null && this.#now() - cached.at < this.#maxAgeMs) return Promise.resolve(cached.figures);
    if (this.#pending !== null) return this.#pending;
    const pending = (async () => {
      const figures = await this.#read();
      this.#value = { at: this.#now(), figures };
      return figures;
    })().finally(() => {
      this.#pending = null;
    });
    this.#pending = pending;
    return pending;
  }
}

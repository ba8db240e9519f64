import type { Db } from './database.js';

/**
 * Whether the quarantine table may hold a row, so an upload's quarantine check (nearly always no)
 * skips its read transaction while the table is known empty. Every write to it goes through the
 * repositories holding this hint, which call `changed()`; the table is read again outside any
 * transaction, so what it sees is committed.
 */
export class QuarantineHint {
  readonly #any: () => boolean;
  /** Whether the table holds a row, as last read; null when a write may have changed that. */
  #known: boolean | null = null;

  constructor(db: Db) {
    const any = db.prepare<[], { n: number }>('SELECT EXISTS (SELECT 1 FROM quarantine) AS n');
    this.#any = () => any.get()!.n === 1;
  }

  get maybeAny(): boolean {
    return (this.#known ??= this.#any());
  }

  /** True only when the table is known empty from an earlier read: asks nothing, so it may be asked inside a transaction. */
  get knownEmpty(): boolean {
    return this.#known === false;
  }

  changed(): void {
    this.#known = null;
  }
}

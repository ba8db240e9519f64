import type { Db } from './database.js';

/**
 * Whether the quarantine table may hold a row. Every upload asks whether its oid is quarantined, a
 * read transaction whose answer is nearly always no; while the table is known empty it is answered
 * here. Only this process writes the index, always through the repositories holding this hint, which
 * call `changed()`; the table is read again outside any transaction, so what it sees is committed.
 */
export class QuarantineHint {
  readonly #any: () => boolean;
  /** Whether the table holds a row, as last read; null when a write may have changed that. */
  #known: boolean | null = null;

  constructor(db: Db) {
    const any = db.prepare<[], { n: number }>('SELECT EXISTS (SELECT 1 FROM quarantine) AS n');
    this.#any = () => any.get()!.n === 1;
  }

  /** False only when the table is known to be empty. */
  get maybeAny(): boolean {
    return (this.#known ??= this.#any());
  }

  /** True only when the table is known empty from an earlier read: asks nothing, so it may be asked inside a transaction. */
  get knownEmpty(): boolean {
    return this.#known === false;
  }

  /** A row was (or is about to be) inserted or deleted. */
  changed(): void {
    this.#known = null;
  }
}

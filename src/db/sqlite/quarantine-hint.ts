import type { Db } from './database.js';

/**
 * Whether the quarantine table may hold a row. An upload asks whether its oid is quarantined before
 * it writes (transfer-service.ts): on its own that is a read transaction (a query and two `fcntl`
 * lock calls, ~20 µs of a 64 KiB upload's ~0.5 ms of server CPU) whose answer is nearly always no,
 * because the table is nearly always empty. While it is known empty the question is answered here.
 *
 * Only this process writes the index (the data directory is locked), and every write to the table
 * goes through the repositories holding this hint, which call `changed()` where they write. The
 * table is read again at the next question, never inside a transaction (better-sqlite3's run
 * synchronously, and the question is asked outside them), so what it sees is committed, whether
 * the write that called `changed()` committed or rolled back.
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

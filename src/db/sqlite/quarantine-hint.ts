import type { Db } from './database.js';

/**
 * Whether the quarantine table may hold a row. An upload asks whether its oid is quarantined before
 * it writes (transfer-service.ts): on its own that is a read transaction (a query and two `fcntl`
 * lock calls, ~20 µs of a 64 KiB upload's ~0.5 ms of server CPU) whose answer is nearly always no,
 * because the table is nearly always empty. While it is known empty the question is answered here.
 *
 * Only this process writes the index (the data directory is locked), and every write to the table
 * goes through the repositories holding this hint: a mark sets it before its insert, so a
 * rolled-back insert leaves it set, which costs only queries; a transaction that removed a row has
 * the table read again once it has committed, never from inside it.
 */
export class QuarantineHint {
  readonly #any: () => boolean;
  #maybeAny: boolean;

  constructor(db: Db) {
    const any = db.prepare<[], { n: number }>('SELECT EXISTS (SELECT 1 FROM quarantine) AS n');
    this.#any = () => any.get()!.n === 1;
    this.#maybeAny = this.#any();
  }

  /** False only when the table is known to be empty. */
  get maybeAny(): boolean {
    return this.#maybeAny;
  }

  /** Called before a row is inserted. */
  marking(): void {
    this.#maybeAny = true;
  }

  /** Called after a committed transaction removed a row: reads the table again. */
  removed(): void {
    this.#maybeAny = this.#any();
  }
}

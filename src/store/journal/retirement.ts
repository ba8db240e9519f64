/** A retirement round running longer than this is reported (it holds segments on disk meanwhile). */
const RETIRE_STALL_MS = 60_000;
const RETIRE_EVERY_MS = 1000;

type Log = (msg: string, fields: object) => void;

export interface Retirable {
  retire(): Promise<number>;
  /** What the running round is doing, for the warning of one that does not finish. */
  readonly retireStep: string;
  /** References the index has not taken yet (replay's, and those of uploads the index failed after their answer). */
  readonly deferredReferences: number;
}

/**
 * Runs the journal's retirement every second, one round at a time, until `stop`: a failed round (a
 * full disk) is retried, said once and again on recovery; one past RETIRE_STALL_MS is reported.
 */
export class RetirementScheduler {
  readonly #journal: Retirable;
  readonly #log: Log;
  readonly #timer: NodeJS.Timeout;
  #running: Promise<void> | null = null;
  #started = 0;
  #stalled = false;
  #failing = false;
  #deferred: number;

  constructor(journal: Retirable, log: Log) {
    this.#journal = journal;
    this.#log = log;
    this.#deferred = journal.deferredReferences;
    this.#timer = setInterval(() => this.#tick(), RETIRE_EVERY_MS);
    this.#timer.unref();
  }

  #tick(): void {
    const journal = this.#journal;
    if (this.#running !== null) {
      // Segments wait on disk while a round runs: one that never ends would let the journal grow unseen.
      if (!this.#stalled && Date.now() - this.#started > RETIRE_STALL_MS) {
        this.#stalled = true;
        this.#log('journal retirement has not finished for a minute', { level: 'warn', step: journal.retireStep });
      }
      return;
    }
    this.#started = Date.now();
    // Replay's deferred references, and those of uploads acknowledged before the index failed them.
    this.#deferred = Math.max(this.#deferred, journal.deferredReferences);
    this.#running = journal
      .retire()
      .then(() => {
        if (this.#failing) this.#log('journal retirement recovered', {});
        this.#failing = false;
        if (this.#deferred > 0 && journal.deferredReferences === 0) this.#log('deferred journal references restored', { records: this.#deferred });
        this.#deferred = journal.deferredReferences;
      })
      .catch((e: unknown) => {
        if (!this.#failing) this.#log('journal retirement failed; retrying every second until it succeeds', { level: 'warn', err: String(e) });
        this.#failing = true;
      })
      .finally(() => {
        if (this.#stalled) this.#log('journal retirement finished', { seconds: Math.round((Date.now() - this.#started) / 1000) });
        this.#stalled = false;
        this.#running = null;
      });
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#running;
  }
}

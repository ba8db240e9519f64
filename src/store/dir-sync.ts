import { open } from 'node:fs/promises';

/**
 * Group commit for directory fsyncs: a rename is durable only once its directory is fsync'd, and
 * concurrent uploads into the same directories share one fsync per round instead of one each.
 */
export class DirSyncer {
  #pending = new Set<string>();
  #waiters: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  #running: Promise<void> | null = null;

  /** Resolves once `dir` has been fsync'd after this call. */
  sync(dir: string): Promise<void> {
    this.#pending.add(dir);
    const done = new Promise<void>((resolve, reject) => this.#waiters.push({ resolve, reject }));
    if (this.#running === null) this.#running = this.#loop();
    return done;
  }

  async #loop(): Promise<void> {
    while (this.#pending.size > 0) {
      const dirs = [...this.#pending];
      const waiters = this.#waiters;
      this.#pending = new Set();
      this.#waiters = [];
      try {
        await Promise.all(dirs.map(fsyncDir));
        for (const w of waiters) w.resolve();
      } catch (e) {
        for (const w of waiters) w.reject(e);
      }
    }
    this.#running = null;
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

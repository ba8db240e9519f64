import { closeSync, constants, fsync, openSync } from 'node:fs';

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

/**
 * One threadpool round trip per directory: its open and close run in line (a cached folder's open
 * is quick, and O_DIRECTORY opens nothing that could block); only the fsync goes to the pool.
 */
function fsyncDir(dir: string): Promise<void> {
  let fd: number;
  try {
    fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  } catch (e) {
    return Promise.reject(e);
  }
  return new Promise<void>((resolve, reject) =>
    fsync(fd, (e) => {
      try {
        closeSync(fd);
      } catch (closeError) {
        e ??= closeError as NodeJS.ErrnoException;
      }
      if (e) reject(e);
      else resolve();
    }),
  );
}

import { watch, type Dirent } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { HANG_CAP_MS } from './wait-for.js';

/**
 * Resolves once `check()` holds, re-checking on each change the file system reports under `dir`
 * (an event, not a clock). A change between the first look and the watch starting is caught by the
 * look right after the watch starts. Aborting `signal` ends the wait unresolved (for the loser of a
 * race); only a real hang (HANG_CAP_MS without it) rejects.
 */
export async function waitForChange<T>(dir: string, check: () => Promise<T | null>, options: { recursive?: boolean; signal?: AbortSignal } = {}): Promise<T> {
  const first = await check();
  if (first !== null) return first;
  return new Promise<T>((resolve, reject) => {
    let checking = Promise.resolve();
    const look = (): void => {
      checking = checking.then(async () => {
        const found = await check();
        if (found !== null) {
          watcher.close();
          clearTimeout(hang);
          resolve(found);
        }
      });
    };
    // The signal ends the wait (and the watch, which would keep the process alive) unresolved.
    const watcher = watch(dir, { recursive: options.recursive ?? false, signal: options.signal }, look);
    watcher.on('error', (e) => reject(e));
    const hang = setTimeout(() => {
      watcher.close();
      reject(new Error(`gave up after ${HANG_CAP_MS / 1000} s waiting for a change under ${dir}`));
    }, HANG_CAP_MS);
    hang.unref();
    options.signal?.addEventListener('abort', () => clearTimeout(hang), { once: true });
    look();
  });
}

/** Resolves with the names in `dir` once `ready(names)` holds (see waitForChange). */
export function waitForDir(dir: string, ready: (names: string[]) => boolean, signal?: AbortSignal): Promise<string[]> {
  return waitForChange(
    dir,
    async () => {
      const names = await readdir(dir).catch(() => [] as string[]);
      return ready(names) ? names : null;
    },
    { signal },
  );
}

/** Every regular file under `dir`, recursively, as paths relative to it. */
export async function filesUnder(dir: string): Promise<string[]> {
  const entries: Dirent[] = await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name).slice(dir.length + 1));
}

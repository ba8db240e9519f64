import { watch, type Dirent } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Resolves with the names in `dir` once `ready(names)` holds, re-checking on each change the file
 * system reports for the directory (an event, not a clock). A change between the first look and
 * the watch starting is caught by the look right after the watch starts.
 */
export async function waitForDir(dir: string, ready: (names: string[]) => boolean): Promise<string[]> {
  const look = async (): Promise<string[] | null> => {
    const names = await readdir(dir).catch(() => [] as string[]);
    return ready(names) ? names : null;
  };
  const first = await look();
  if (first !== null) return first;
  return new Promise<string[]>((resolve, reject) => {
    let checking = Promise.resolve();
    const watcher = watch(dir, () => {
      checking = checking.then(async () => {
        const names = await look();
        if (names !== null) {
          watcher.close();
          resolve(names);
        }
      });
    });
    watcher.on('error', (e) => reject(e));
    void look().then((names) => {
      if (names !== null) {
        watcher.close();
        resolve(names);
      }
    });
  });
}

/** Every regular file under `dir`, recursively, as paths relative to it. */
export async function filesUnder(dir: string): Promise<string[]> {
  const entries: Dirent[] = await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath ?? (e as unknown as { path: string }).path, e.name).slice(dir.length + 1));
}

import { execFileSync } from 'node:child_process';
import { closeSync, constants, existsSync, openSync, unlinkSync } from 'node:fs';

/** Whether files in `dir` can be opened with O_DIRECT. */
export function supportsDirect(dir: string): boolean {
  const probe = `${dir}/.direct-probe`;
  try {
    closeSync(openSync(probe, constants.O_WRONLY | constants.O_CREAT | constants.O_DIRECT));
    return true;
  } catch {
    return false;
  } finally {
    if (existsSync(probe)) unlinkSync(probe);
  }
}

/** Bytes of `path` in the page cache, from util-linux's fincore; null where it is not installed. */
export function cachedBytes(path: string): number | null {
  try {
    return Number(execFileSync('fincore', ['--bytes', '--noheadings', '--raw', '--output', 'RES', path], { encoding: 'utf8' }).trim());
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

import { statfsSync } from 'node:fs';
import { lfsError, type LfsError } from '../errors/errors.js';

const FRESH_MS = 1000;

/**
 * Free space the disk backend keeps back (SVC_DISK_RESERVE): new object bytes are admitted only while
 * they leave `bytes` free, so what frees space or writes little (retain, checkpoints, locks) still
 * finds room. A refusal is decided on a fresh statfs, so space freed meanwhile admits the next upload.
 */
export class DiskReserve {
  /** 0: no reserve (every admission passes; a full disk still answers 507 from ENOSPC). */
  readonly bytes: number;
  readonly #dir: string;
  #free = 0;
  #block = 4096;
  #readAt = Number.NEGATIVE_INFINITY;

  constructor(dir: string, bytes: number) {
    this.#dir = dir;
    this.bytes = bytes;
  }

  refresh(): number | null {
    try {
      const { bavail, bsize } = statfsSync(this.#dir);
      this.#free = bavail * bsize;
      this.#block = bsize;
      this.#readAt = performance.now();
      return this.#free;
    } catch {
      this.#readAt = Number.NEGATIVE_INFINITY;
      return null;
    }
  }

  /** Whether `size` more bytes leave the reserve free; `take` takes them off the cached figure (a PUT about to write). */
  admits(size: number, take = true): boolean {
    if (this.bytes === 0) return true;
    if (performance.now() - this.#readAt > FRESH_MS && this.refresh() === null) return true;
    if (this.#free - size < this.bytes) {
      const fresh = this.refresh();
      if (fresh !== null && fresh - size < this.bytes) return false;
    }
    if (take) this.#free -= size;
    return true;
  }

  /** Whether uploads are refused now (a fresh statfs, for the metrics): not one more block fits above the reserve. */
  reached(): boolean {
    if (this.bytes === 0) return false;
    const free = this.refresh();
    return free !== null && free - this.#block < this.bytes;
  }
}

export const RESERVE_MESSAGE =
  "The server's disk has reached the free space it keeps for its index and maintenance (SVC_DISK_RESERVE): no new objects are taken until space is freed";

export function reserveReached(): LfsError {
  return lfsError('LFS_ERR_STORAGE_FULL', RESERVE_MESSAGE);
}

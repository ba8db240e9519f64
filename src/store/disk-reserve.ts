import { statfsSync } from 'node:fs';
import { lfsError, type LfsError } from '../errors/errors.js';

/** The free-space figure admissions go by is read again once it is this old (ms). */
const FRESH_MS = 1000;

/**
 * Free space the disk backend keeps back (SVC_DISK_RESERVE). New object bytes (uploads, imports,
 * compress copies) are admitted only while they leave `bytes` free, so what frees space or writes
 * little (retain, checkpoints, locks, sign-ins, quarantine, journal retirement) still finds room on a
 * store that uploads filled. One statfs at most every FRESH_MS, admitted bytes taken off that figure;
 * a refusal is always decided on a fresh figure, so space freed meanwhile admits the next upload.
 */
export class DiskReserve {
  /** 0: no reserve (every admission passes; a full disk still answers 507 from ENOSPC). */
  readonly bytes: number;
  readonly #dir: string;
  #free = 0;
  /** The file system's block size (statfs bsize). */
  #block = 4096;
  #readAt = Number.NEGATIVE_INFINITY;

  constructor(dir: string, bytes: number) {
    this.#dir = dir;
    this.bytes = bytes;
  }

  /** Free bytes by a statfs now; null when the file system cannot be asked (then nothing is refused here). */
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

  /**
   * Whether `size` more bytes leave the reserve free. `take`: the bytes are about to be written (an
   * upload's PUT), so they come off the cached figure; a batch answer only asks.
   */
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

  /**
   * Whether uploads are refused now (a fresh statfs; for the metrics): not even one more block fits
   * above the reserve, and the smallest upload takes a block.
   */
  reached(): boolean {
    if (this.bytes === 0) return false;
    const free = this.refresh();
    return free !== null && free - this.#block < this.bytes;
  }
}

/** What a client is told when its upload would enter the reserve (a PUT's 507 body, a batch entry's message). */
export const RESERVE_MESSAGE =
  "The server's disk has reached the free space it keeps for its index and maintenance (SVC_DISK_RESERVE): no new objects are taken until space is freed";

/** The 507 of an upload, import or compress refused at the reserve. */
export function reserveReached(): LfsError {
  return lfsError('LFS_ERR_STORAGE_FULL', RESERVE_MESSAGE);
}

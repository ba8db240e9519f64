/**
 * Whole-file work of the maintenance jobs on their low-priority pool: hashing plain files and the
 * frame codec compress writes through. Synchronous reads: blocking this worker thread is the point.
 */
import { createHash } from 'node:crypto';
import { setPriority } from 'node:os';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { reportBytes } from './byte-meter.js';

export { compressFrame, decodeFrame } from './frame.worker.js';

// Maintenance yields the CPU to requests and uploads: on Linux the nice value is per thread, so this
// lowers only this worker thread (see WorkerTasks). Where it is not allowed the thread runs as is.
try {
  setPriority(0, 10);
} catch {
  // not permitted here
}

/** Files are read in chunks of this size. */
const READ_CHUNK = 4 << 20;

let plainBuf: Buffer | null = null;

export interface HashFileTask {
  readonly path: string;
  /** A ByteMeter's buffer: the bytes read so far are stored there after every chunk. */
  readonly meter?: SharedArrayBuffer;
}

/**
 * The outcome of hashing one file. `unreadable` means an I/O error or a file that changed size
 * while read; `ok` carries the digest, which the caller compares with the oid the file is named by.
 */
export interface HashFileResult {
  readonly outcome: 'ok' | 'missing' | 'unreadable';
  readonly sha256: string | null;
  readonly size: number;
  readonly detail: string | null;
}

function readExactly(fd: number, buf: Buffer, length: number, position: number): void {
  let at = 0;
  while (at < length) {
    const n = readSync(fd, buf, at, length - at, position + at);
    if (n === 0) throw new Error(`short read at ${position + at} (file truncated?)`);
    at += n;
  }
}

/** Legacy and imported files are never framed: hashed as they are, a chunk at a time. */
export function hashFile(task: HashFileTask): HashFileResult {
  let fd: number;
  try {
    fd = openSync(task.path, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { outcome: code === 'ENOENT' ? 'missing' : 'unreadable', sha256: null, size: 0, detail: String(e) };
  }
  try {
    const size = fstatSync(fd).size;
    const h = createHash('sha256');
    plainBuf ??= Buffer.allocUnsafe(READ_CHUNK);
    for (let pos = 0; pos < size; ) {
      const n = Math.min(READ_CHUNK, size - pos);
      readExactly(fd, plainBuf, n, pos);
      h.update(plainBuf.subarray(0, n));
      pos += n;
      reportBytes(task.meter, pos);
    }
    return { outcome: 'ok', sha256: h.digest('hex'), size, detail: null };
  } catch (e) {
    return { outcome: 'unreadable', sha256: null, size: 0, detail: (e as Error).message };
  } finally {
    closeSync(fd);
  }
}

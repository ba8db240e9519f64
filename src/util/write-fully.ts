import { write, writeSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';

/**
 * Writes that finish or fail: a write(2) may store fewer bytes than asked without an error (a nearly
 * full disk reports ENOSPC only on the next call), and taking it for whole would leave zeros in an object.
 */
function noProgress(): NodeJS.ErrnoException {
  return Object.assign(new Error('ENOSPC: write made no progress'), { code: 'ENOSPC' });
}

export function writeFullySync(fd: number, buf: Uint8Array, position: number): void {
  for (let at = 0; at < buf.byteLength; ) {
    const n = writeSync(fd, buf, at, buf.byteLength - at, position + at);
    if (n <= 0) throw noProgress();
    at += n;
  }
}

export function writeFully(fd: number, buf: Uint8Array, position: number, done: (err: NodeJS.ErrnoException | null) => void): void {
  const step = (at: number): void => {
    if (at >= buf.byteLength) {
      done(null);
      return;
    }
    write(fd, buf, at, buf.byteLength - at, position + at, (err, n) => {
      if (err) done(err);
      else if (n <= 0) done(noProgress());
      else step(at + n);
    });
  };
  step(0);
}

export function writeFullyAt(fh: FileHandle, buf: Uint8Array, position: number): Promise<void> {
  return new Promise((resolve, reject) => writeFully(fh.fd, buf, position, (err) => (err ? reject(err) : resolve())));
}

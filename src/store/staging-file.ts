import { randomBytes } from 'node:crypto';
import { constants, write } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { storageFault } from '../errors/storage-fault.js';
import type { Oid } from '../protocol/oid.js';
import { DIRECT_ALIGN, isAlignedMemory } from './buffer-pool.js';
import { writeFully } from '../util/write-fully.js';

/** Directories whose file system refused O_DIRECT (tmpfs does): not asked again. */
const noDirectIo = new Set<string>();

/**
 * A file under `staging/` receiving one upload with positioned writes, several in flight; removed
 * unless `keep()` was called after it was renamed into place. With `direct`, aligned writes from
 * aligned memory go through a second, O_DIRECT descriptor, so a huge upload does not grow the page
 * cache; `seal`'s fdatasync makes both kinds durable.
 */
export class StagingFile {
  readonly path: string;
  readonly #fh: FileHandle;
  readonly #direct: FileHandle | null;
  /** Cleared if a direct write is refused; the descriptor stays open until close (see write). */
  #directUsable = true;
  #pending = 0;
  /** One past the last byte any write reached: the file's size, as it was created empty. */
  #end = 0;
  #error: unknown = null;
  #idle: (() => void)[] = [];
  #closed = false;
  #kept = false;

  private constructor(path: string, fh: FileHandle, direct: FileHandle | null) {
    this.path = path;
    this.#fh = fh;
    this.#direct = direct;
  }

  static async create(dir: string, oid: Oid, options: { direct?: boolean } = {}): Promise<StagingFile> {
    const path = stagingPath(dir, oid);
    // Read-write: a framed upload may read back what it wrote (not smaller, or raw frames' digests).
    const fh = await open(path, 'wx+', 0o644);
    let direct: FileHandle | null = null;
    if (options.direct === true && !noDirectIo.has(dir)) {
      try {
        direct = await open(path, constants.O_WRONLY | constants.O_DIRECT);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EINVAL') {
          await fh.close().catch(() => undefined);
          await unlink(path).catch(() => undefined);
          throw e;
        }
        noDirectIo.add(dir);
      }
    }
    return new StagingFile(path, fh, direct);
  }

  get direct(): boolean {
    return this.#direct !== null && this.#directUsable;
  }

  get error(): unknown {
    return this.#error;
  }

  write(data: Uint8Array, position: number, done: () => void): void {
    this.#pending++;
    this.#end = Math.max(this.#end, position + data.byteLength);
    const finished = (err: NodeJS.ErrnoException | null): void => {
      if (err && this.#error === null) this.#error = mapIoError(err);
      this.#pending--;
      done();
      if (this.#pending === 0) for (const w of this.#idle.splice(0)) w();
    };
    const aligned = this.direct && position % DIRECT_ALIGN === 0 && isAlignedMemory(data) ? data.byteLength - (data.byteLength % DIRECT_ALIGN) : 0;
    if (aligned === 0) {
      writeFully(this.#fh.fd, data, position, finished);
      return;
    }
    // One direct write of the aligned part; the rest (the tail, a short write on a full disk) goes
    // through the ordinary descriptor, which reports ENOSPC as such.
    write(this.#direct!.fd, data, 0, aligned, position, (err, n) => {
      if (err?.code === 'EINVAL') {
        // Accepted at open, refused at write: no real O_DIRECT. The descriptor is closed only with
        // the file: another direct write may be in flight on it, and its number could be reused.
        this.#directUsable = false;
        n = 0;
      } else if (err) {
        finished(err);
        return;
      }
      if (n === data.byteLength) finished(null);
      else writeFully(this.#fh.fd, data.subarray(n), position + n, finished);
    });
  }

  async settled(): Promise<void> {
    if (this.#pending > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
    if (this.#error !== null) throw this.#error;
  }

  async seal(length: number): Promise<void> {
    await this.settled();
    try {
      // Only when something was written past the end: a no-op truncate still costs a round trip.
      if (this.#end !== length) await this.#fh.truncate(length);
      await this.#fh.datasync();
    } catch (e) {
      throw mapIoError(e);
    }
    await this.close();
  }

  async read(buffer: Uint8Array, position: number): Promise<number> {
    return (await this.#fh.read(buffer, 0, buffer.byteLength, position)).bytesRead;
  }

  keep(): void {
    this.#kept = true;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.settled().catch(() => undefined);
    await this.#direct?.close().catch(() => undefined);
    await this.#fh.close().catch(() => undefined);
  }

  async dispose(): Promise<void> {
    await this.settled().catch(() => undefined);
    await this.close();
    if (!this.#kept) await unlink(this.path).catch(() => undefined);
  }
}

/** A new staging file's name: the oid, then random bytes (concurrent writers of one oid never share one). */
export function stagingPath(dir: string, oid: Oid): string {
  return join(dir, `${oid}.${randomBytes(8).toString('hex')}.part`);
}

/** A store I/O error as the LFS error it names (a full disk is LFS_ERR_STORAGE_FULL), or as it is. */
export function mapIoError(e: unknown): unknown {
  return storageFault(e) ?? e;
}

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
 * A file under `staging/` that receives one upload with positioned writes. Several writes may be in
 * flight at once (pwrite at explicit offsets); `settled()` waits for all of them. It is removed
 * unless `keep()` was called by the store after renaming it into place.
 *
 * With `direct`, the file gets a second descriptor opened with O_DIRECT, and aligned writes from
 * aligned memory (AlignedBufferPool) go through it, past the page cache: a multi-gigabyte upload
 * then costs no kernel copy into the cache and no cache growth. Everything else (the unaligned
 * tail, short writes, file systems without O_DIRECT) goes through the ordinary descriptor, and
 * `seal`'s fdatasync makes both kinds durable.
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
    // Read-write: a framed upload whose framed form is not smaller, or whose untried raw frames need
    // their digests, reads back what it wrote.
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

  /** Whether aligned writes bypass the page cache (false where the file system has no O_DIRECT). */
  get direct(): boolean {
    return this.#direct !== null && this.#directUsable;
  }

  /** The first write error, if any (ENOSPC becomes LFS_ERR_STORAGE_FULL). */
  get error(): unknown {
    return this.#error;
  }

  /** Starts a positioned write; `done` runs when it completed (the buffer may be reused then). */
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
    // One direct write of the aligned part; whatever it did not store (the tail, a short write on a
    // full disk) goes through the ordinary descriptor, which reports ENOSPC as such.
    write(this.#direct!.fd, data, 0, aligned, position, (err, n) => {
      if (err?.code === 'EINVAL') {
        // Accepted at open, refused at write: a file system without real O_DIRECT. The descriptor is
        // only closed with the file: another direct write may still be in flight on it, and a closed
        // number can be reused by the next open.
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

  /** Resolves when no write is in flight; rejects with the first write error. */
  async settled(): Promise<void> {
    if (this.#pending > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
    if (this.#error !== null) throw this.#error;
  }

  /** Makes the written bytes durable and closes the file. */
  async seal(length: number): Promise<void> {
    await this.settled();
    try {
      // Only when something was written past the end (a rewrite shorter than the first try): a
      // truncate that changes nothing is still a threadpool round trip per object.
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

  /** The store moved the file to its final name: do not remove it. */
  keep(): void {
    this.#kept = true;
  }

  /** Closes both descriptors once no write is in flight on them. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.settled().catch(() => undefined);
    await this.#direct?.close().catch(() => undefined);
    await this.#fh.close().catch(() => undefined);
  }

  /** Closes (after in-flight writes) and removes the file unless it was kept. Idempotent. */
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

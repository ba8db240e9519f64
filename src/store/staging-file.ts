import { randomBytes } from 'node:crypto';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import { writeFully } from './write-fully.js';

/**
 * A file under `staging/` that receives one upload with positioned writes. Several writes may be in
 * flight at once (pwrite at explicit offsets); `settled()` waits for all of them. It is removed
 * unless `keep()` was called by the store after renaming it into place.
 */
export class StagingFile {
  readonly path: string;
  readonly #fh: FileHandle;
  #pending = 0;
  #error: unknown = null;
  #idle: (() => void)[] = [];
  #closed = false;
  #kept = false;

  private constructor(path: string, fh: FileHandle) {
    this.path = path;
    this.#fh = fh;
  }

  static async create(dir: string, oid: Oid): Promise<StagingFile> {
    const path = join(dir, `${oid}.${randomBytes(8).toString('hex')}.part`);
    return new StagingFile(path, await open(path, 'wx', 0o644));
  }

  /** The first write error, if any (ENOSPC becomes LFS_ERR_STORAGE_FULL). */
  get error(): unknown {
    return this.#error;
  }

  get pending(): number {
    return this.#pending;
  }

  /** Starts a positioned write; `done` runs when it completed (the buffer may be reused then). */
  write(data: Uint8Array, position: number, done: () => void): void {
    this.#pending++;
    writeFully(this.#fh.fd, data, position, (err) => {
      if (err && this.#error === null) this.#error = mapIoError(err);
      this.#pending--;
      done();
      if (this.#pending === 0) for (const w of this.#idle.splice(0)) w();
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
      await this.#fh.truncate(length);
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

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#fh.close().catch(() => undefined);
  }

  /** Closes (after in-flight writes) and removes the file unless it was kept. Idempotent. */
  async dispose(): Promise<void> {
    await this.settled().catch(() => undefined);
    await this.close();
    if (!this.#kept) await unlink(this.path).catch(() => undefined);
  }
}

export function mapIoError(e: unknown): unknown {
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return lfsError('LFS_ERR_STORAGE_FULL');
  return e;
}

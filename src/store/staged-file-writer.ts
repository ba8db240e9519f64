import { lfsError } from '../errors/errors.js';
import { Backlog } from './backlog.js';
import { ChunkGatherer, directBuffers } from './buffer-pool.js';
import type { StagingFile } from './staging-file.js';
import type { ObjectWriter, PutResult } from './types.js';

/** Moves a sealed staging file to the object's final name (the store's part of finishing). */
export type CommitFn = (file: StagingFile, storedSize: number) => Promise<PutResult>;

/**
 * Most writes on their way to disk per upload before the caller is asked to wait: as many as the
 * verify layer has blocks in flight, or this limit, not the hasher, pauses the socket. The libuv
 * pool has four threads, so one large upload can fill it for the length of one write (0.5–3 ms here).
 */
const MAX_IN_FLIGHT = 4;

/**
 * The disk backend's writer: bytes exactly as given, appended to a staging file with positioned
 * writes, then sealed (fdatasync) and committed by the store. Blocks handed down with `release`
 * (the verify layer's aligned shared blocks, the compress layer's frames) are written from where
 * they are — with O_DIRECT when the staging file has it and they are aligned — and released when
 * written; other chunks are copied into pooled aligned 1 MiB buffers first. At most MAX_IN_FLIGHT
 * writes are outstanding, so an upload costs a fixed few MiB whatever its size.
 */
export class StagedFileWriter implements ObjectWriter {
  readonly #file: StagingFile;
  readonly #commit: CommitFn;
  #written = 0;
  readonly #gather = new ChunkGatherer(directBuffers, (buf, len) => this.#write(buf.subarray(0, len), () => directBuffers.giveView(buf)));
  readonly #backlog = new Backlog(MAX_IN_FLIGHT);
  #failed: unknown = null;

  constructor(file: StagingFile, commit: CommitFn) {
    this.#file = file;
    this.#commit = commit;
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    if (this.#failed === null && this.#file.error !== null) this.#failed = this.#file.error;
    if (this.#failed !== null) {
      release?.();
      throw this.#failed;
    }
    if (release === undefined) this.#gather.add(chunk);
    else {
      this.#gather.flush(); // whatever was gathered goes first: writes stay in order
      this.#write(chunk, release);
    }
    return !this.#backlog.full();
  }

  onDrain(listener: () => void): void {
    this.#backlog.onDrain(listener);
  }

  #write(bytes: Uint8Array, release: () => void): void {
    if (bytes.byteLength === 0) {
      release();
      return;
    }
    const position = this.#written;
    this.#written += bytes.byteLength;
    this.#file.write(bytes, position, this.#backlog.add(1, release));
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    this.#gather.flush();
    await this.#file.seal(this.#written);
    return this.#commit(this.#file, this.#written);
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#gather.discard();
    await this.#file.dispose();
  }
}

import { lfsError } from '../errors/errors.js';
import { Backlog } from './backlog.js';
import { ChunkGatherer, directBuffers } from './buffer-pool.js';
import type { StagingFile } from './staging-file.js';
import type { ObjectWriter, PutResult } from './types.js';

/** Moves a sealed staging file to the object's final name (the store's part of finishing). */
export type CommitFn = (file: StagingFile, storedSize: number) => Promise<PutResult>;

/** Writes in flight per upload before the socket pauses; the libuv pool's four threads can be filled by one large upload's writes. */
const MAX_IN_FLIGHT = 4;

/**
 * The disk backend's writer: positioned writes into a staging file, sealed and committed by the store.
 * Released blocks are written where they are (O_DIRECT when aligned), other chunks copied into pooled
 * aligned buffers; at most MAX_IN_FLIGHT writes outstanding, a fixed few MiB per upload.
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

import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { HashSession } from '../workers/hasher.js';
import { ioBuffers, sharedIoBuffers } from './buffer-pool.js';
import { IncomingCheck } from './incoming-check.js';
import type { StagingFile } from './staging-file.js';
import type { ObjectWriter, PutResult } from './types.js';

/** Moves a sealed staging file to the object's final name (the store's part of finishing). */
export type CommitFn = (file: StagingFile, result: Omit<PutResult, 'created'>) => Promise<PutResult>;

/**
 * Most chunks written but not yet on disk (and hashed) per upload before the socket is paused. Two
 * keep the disk busy while the next chunk fills; more only contend on the file and crowd the libuv
 * pool that other uploads need (measured: four in flight cost 25–45% more CPU for the same throughput).
 */
const MAX_IN_FLIGHT = 2;

type Chunk = ArrayBuffer | SharedArrayBuffer;

/**
 * Writes an upload exactly as it arrives. Every chunk is counted on arrival and copied into a pooled
 * 1 MiB buffer; full buffers are written with pwrite while the next fills. sha256 runs in line, or —
 * given a HashSession — on a hasher thread reading the same shared buffer while it is written, so
 * the HTTP thread only copies. A buffer returns to its pool once written and hashed; at most
 * MAX_IN_FLIGHT are outstanding, so an upload costs a fixed few MiB whatever its size.
 */
export class RawWriter implements ObjectWriter {
  readonly #check: IncomingCheck;
  readonly #file: StagingFile;
  readonly #commit: CommitFn;
  readonly #hash: HashSession | null;
  #written = 0;
  #buf: Chunk | null = null;
  #fill = 0;
  #inFlight = 0;
  /** Hash updates, in order; the digest is asked after the last. */
  #hashed: Promise<void> = Promise.resolve();
  #idle: (() => void)[] = [];
  #drain: (() => void) | null = null;
  #waiting = false;
  #failed: unknown = null;

  constructor(oid: Oid, expected: number | null, file: StagingFile, commit: CommitFn, hash: HashSession | null = null) {
    this.#check = new IncomingCheck(oid, expected, hash === null);
    this.#file = file;
    this.#commit = commit;
    this.#hash = hash;
  }

  #take(): Chunk {
    return this.#hash === null ? ioBuffers.take() : sharedIoBuffers.take();
  }

  #give(buf: Chunk): void {
    if (buf instanceof SharedArrayBuffer) sharedIoBuffers.give(buf);
    else ioBuffers.give(buf);
  }

  write(chunk: Uint8Array): boolean {
    if (this.#failed !== null) throw this.#failed;
    if (this.#file.error !== null) throw (this.#failed = this.#file.error);
    try {
      this.#check.take(chunk);
    } catch (e) {
      throw (this.#failed = e);
    }
    let off = 0;
    while (off < chunk.byteLength) {
      this.#buf ??= this.#take();
      const n = Math.min(chunk.byteLength - off, this.#buf.byteLength - this.#fill);
      new Uint8Array(this.#buf, this.#fill, n).set(chunk.subarray(off, off + n));
      this.#fill += n;
      off += n;
      if (this.#fill === this.#buf.byteLength) this.#flush();
    }
    if (this.#inFlight >= MAX_IN_FLIGHT) {
      this.#waiting = true;
      return false;
    }
    return true;
  }

  onDrain(listener: () => void): void {
    this.#drain = listener;
  }

  #flush(): void {
    const buf = this.#buf!;
    const len = this.#fill;
    this.#buf = null;
    this.#fill = 0;
    const position = this.#written;
    this.#written += len;
    this.#inFlight++;
    let pending = this.#hash === null ? 1 : 2;
    const done = (): void => {
      if (--pending > 0) return;
      this.#give(buf);
      this.#inFlight--;
      if (this.#waiting && this.#inFlight < MAX_IN_FLIGHT) {
        this.#waiting = false;
        this.#drain?.();
      }
      if (this.#inFlight === 0) for (const w of this.#idle.splice(0)) w();
    };
    this.#file.write(new Uint8Array(buf, 0, len), position, done);
    if (this.#hash !== null) {
      const update = this.#hash.update(buf as SharedArrayBuffer, len);
      this.#hashed = this.#hashed.then(() => update);
      this.#hashed.catch(() => undefined); // a failure is recorded in #failed by the line below
      update.then(done, (e: unknown) => {
        this.#failed ??= e;
        done();
      });
    }
  }

  async #settled(): Promise<void> {
    if (this.#inFlight > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    if (this.#fill > 0) this.#flush();
    if (this.#buf !== null) {
      this.#give(this.#buf);
      this.#buf = null;
    }
    await this.#settled();
    if (this.#failed !== null) throw this.#failed;
    this.#check.verify(this.#hash === null ? undefined : await this.#hashed.then(() => this.#hash!.digest()));
    await this.#file.seal(this.#written);
    return this.#commit(this.#file, { size: this.#check.count, storedSize: this.#written });
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#hash?.drop();
    if (this.#buf !== null) {
      this.#give(this.#buf);
      this.#buf = null;
    }
    await this.#settled();
    await this.#file.dispose();
  }
}

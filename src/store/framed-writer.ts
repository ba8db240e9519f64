import zstd from 'zstd-napi/binding.js';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { WorkerPool } from '../workers/pool.js';
import { BufferPool, FRAME_SIZE } from './buffer-pool.js';
import { IncomingCheck } from './incoming-check.js';
import { Codec, TRAILER_SIZE, encodeIndex, encodeTrailer, type FrameEntry } from './frame-format.js';
import type { CommitFn } from './raw-writer.js';
import type { StagingFile } from './staging-file.js';
import type { ObjectWriter, PutResult } from './types.js';

/** Frames of one upload compressing or being written at once before the socket is paused. */
const MAX_FRAMES_IN_FLIGHT = 2;

export const frameBuffers = new BufferPool(FRAME_SIZE, 16);
export const compressedBuffers = new BufferPool(zstd.compressBound(FRAME_SIZE), 16);

/**
 * Writes an upload as independent zstd frames (frame-format.ts). sha256 runs in line as bytes
 * arrive; each full frame goes to the worker pool to be compressed and BLAKE3-hashed while the next
 * one fills, and frames are written in order at their final offsets. At the end the framed form is
 * kept only if it is smaller than the object; otherwise the object is stored exactly as it arrived.
 */
export class FramedWriter implements ObjectWriter {
  readonly #check: IncomingCheck;
  readonly #file: StagingFile;
  readonly #commit: CommitFn;
  readonly #pool: WorkerPool;
  readonly #level: number;
  #frame: ArrayBuffer | null = null;
  #fill = 0;
  /** Frames handed to the pool, in order; each settles once its bytes are written. */
  #chain: Promise<void> = Promise.resolve();
  #inFlight = 0;
  #position = 0;
  readonly #entries: FrameEntry[] = [];
  #waiting = false;
  #drain: (() => void) | null = null;
  #failed: unknown = null;

  constructor(oid: Oid, expected: number | null, file: StagingFile, commit: CommitFn, pool: WorkerPool, level: number) {
    this.#check = new IncomingCheck(oid, expected);
    this.#file = file;
    this.#commit = commit;
    this.#pool = pool;
    this.#level = level;
  }

  write(chunk: Uint8Array): boolean {
    if (this.#failed !== null) throw this.#failed;
    try {
      this.#check.take(chunk);
    } catch (e) {
      throw (this.#failed = e);
    }
    let off = 0;
    while (off < chunk.byteLength) {
      this.#frame ??= frameBuffers.take();
      const n = Math.min(chunk.byteLength - off, FRAME_SIZE - this.#fill);
      new Uint8Array(this.#frame, this.#fill, n).set(chunk.subarray(off, off + n));
      this.#fill += n;
      off += n;
      if (this.#fill === FRAME_SIZE) this.#submit();
    }
    if (this.#inFlight >= MAX_FRAMES_IN_FLIGHT) {
      this.#waiting = true;
      return false;
    }
    return true;
  }

  onDrain(listener: () => void): void {
    this.#drain = listener;
  }

  /** Sends the filled frame to the pool; its write is chained after every earlier frame's. */
  #submit(): void {
    const input = this.#frame!;
    const length = this.#fill;
    this.#frame = null;
    this.#fill = 0;
    this.#inFlight++;
    const compressed = this.#pool.compress({ input, length, out: compressedBuffers.take(), level: this.#level });
    // A failure surfaces through the chain; this keeps a frame behind an earlier failure from
    // becoming an unhandled rejection (which would end the process).
    compressed.catch(() => undefined);
    this.#chain = this.#chain.then(async () => {
      const r = await compressed;
      try {
        const bytes = r.codec === Codec.Zstd ? new Uint8Array(r.out, 0, r.storedLength) : new Uint8Array(r.input, 0, length);
        await new Promise<void>((resolve) => this.#file.write(bytes, this.#position, resolve));
        if (this.#file.error !== null) throw this.#file.error;
        this.#position += r.storedLength;
        this.#entries.push({ storedLength: r.storedLength, codec: r.codec, digest: r.digest });
      } finally {
        frameBuffers.give(r.input);
        compressedBuffers.give(r.out);
      }
    });
    this.#chain
      .catch((e: unknown) => {
        this.#failed ??= e;
      })
      .finally(() => {
        this.#inFlight--;
        if (this.#waiting && this.#inFlight < MAX_FRAMES_IN_FLIGHT) {
          this.#waiting = false;
          this.#drain?.();
        }
      });
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    if (this.#fill > 0) this.#submit();
    else if (this.#frame !== null) {
      frameBuffers.give(this.#frame);
      this.#frame = null;
    }
    await this.#chain;
    if (this.#failed !== null) throw this.#failed;
    this.#check.verify();
    const size = this.#check.count;

    const index = encodeIndex(this.#entries);
    const framedSize = this.#position + index.length + TRAILER_SIZE;
    if (framedSize < size) {
      const trailer = encodeTrailer(FRAME_SIZE, size, this.#entries.length, this.#position, index);
      await new Promise<void>((resolve) => this.#file.write(Buffer.concat([index, trailer]), this.#position, resolve));
      await this.#file.seal(framedSize);
      return this.#commit(this.#file, { size, storedSize: framedSize });
    }
    if (this.#entries.every((e) => e.codec === Codec.Raw)) {
      // All frames raw: the frames region is the object exactly as it arrived.
      await this.#file.seal(size);
      return this.#commit(this.#file, { size, storedSize: size });
    }
    // Some frames shrank but the whole did not (index overhead on a tiny object): store it plain.
    await this.#rewritePlain();
    return this.#commit(this.#file, { size, storedSize: size });
  }

  /** Rare path: decode the few frames in place into their plain bytes. Objects here are one small frame. */
  async #rewritePlain(): Promise<void> {
    await this.#file.settled();
    const parts: Buffer[] = [];
    let at = 0;
    for (const e of this.#entries) {
      const stored = Buffer.alloc(e.storedLength);
      await this.#file.read(stored, at);
      at += e.storedLength;
      parts.push(e.codec === Codec.Zstd ? Buffer.from(decompressSmall(stored)) : stored);
    }
    const plain = Buffer.concat(parts);
    await new Promise<void>((resolve) => this.#file.write(plain, 0, resolve));
    await this.#file.seal(plain.length);
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    await this.#chain.catch(() => undefined);
    if (this.#frame !== null) {
      frameBuffers.give(this.#frame);
      this.#frame = null;
    }
    await this.#file.dispose();
  }
}

function decompressSmall(stored: Buffer): Uint8Array {
  const size = zstd.getFrameContentSize(stored) ?? FRAME_SIZE;
  const out = new Uint8Array(size);
  const n = zstd.decompress(out, stored);
  return out.subarray(0, n);
}

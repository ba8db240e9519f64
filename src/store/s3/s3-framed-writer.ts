import { lfsError } from '../../errors/errors.js';
import type { Oid } from '../../protocol/oid.js';
import type { WorkerPool } from '../../workers/pool.js';
import { FRAME_SIZE } from '../buffer-pool.js';
import { Codec, TRAILER_SIZE, encodeIndex, encodeTrailer, type FrameEntry } from '../frame-format.js';
import { compressedBuffers, frameBuffers } from '../framed-writer.js';
import { IncomingCheck } from '../incoming-check.js';
import type { ObjectWriter, PutResult } from '../types.js';
import type { S3Client } from './s3-client.js';
import { S3Upload } from './s3-upload.js';

/** Frames of one upload compressing or being sent at once before the socket is paused. */
const MAX_FRAMES_IN_FLIGHT = 2;

/** Object metadata marking a key written by this writer: only such keys are probed for a frame trailer. */
export const FRAMED_META = { name: 'x-amz-meta-stowage-format', value: 'frames-v1' } as const;

/**
 * The disk store's framed format (frame-format.ts), written to the bucket: sha256 runs in line, full
 * frames are compressed and BLAKE3-hashed on the worker pool while the next one fills, and the stored
 * frames are appended in order to an S3Upload, then the index and the trailer. When every frame stayed
 * raw (incompressible data) no index is written, so the key holds the object exactly as it arrived
 * (and presigned downloads may serve it). Unlike on disk, a framed object that came out marginally
 * larger than the plain one is kept framed: a bucket key cannot be rewritten in place.
 */
export class S3FramedWriter implements ObjectWriter {
  readonly #check: IncomingCheck;
  readonly #upload: S3Upload;
  readonly #pool: WorkerPool;
  readonly #level: number;
  #frame: ArrayBuffer | null = null;
  #fill = 0;
  #chain: Promise<void> = Promise.resolve();
  #inFlight = 0;
  readonly #entries: FrameEntry[] = [];
  #waiting = false;
  #drain: (() => void) | null = null;
  #failed: unknown = null;

  constructor(client: S3Client, key: string, oid: Oid, expected: number | null, pool: WorkerPool, level: number) {
    this.#check = new IncomingCheck(oid, expected);
    this.#upload = new S3Upload(client, key, expected, { [FRAMED_META.name]: FRAMED_META.value });
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

  /** Compresses the filled frame on the pool; its bytes are appended after every earlier frame's. */
  #submit(): void {
    const input = this.#frame!;
    const length = this.#fill;
    this.#frame = null;
    this.#fill = 0;
    this.#inFlight++;
    const compressed = this.#pool.compress({ input, length, out: compressedBuffers.take(), level: this.#level });
    compressed.catch(() => undefined); // surfaced through the chain, never unhandled
    this.#chain = this.#chain.then(async () => {
      const r = await compressed;
      try {
        this.#upload.push(r.codec === Codec.Zstd ? new Uint8Array(r.out, 0, r.storedLength) : new Uint8Array(r.input, 0, length));
        this.#entries.push({ storedLength: r.storedLength, codec: r.codec, digest: r.digest });
      } finally {
        frameBuffers.give(r.input);
        compressedBuffers.give(r.out);
      }
      await this.#upload.ready();
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
    if (!this.#entries.every((e) => e.codec === Codec.Raw)) {
      const framesEnd = this.#upload.total;
      const index = encodeIndex(this.#entries);
      this.#upload.push(index);
      this.#upload.push(encodeTrailer(FRAME_SIZE, size, this.#entries.length, framesEnd, index));
      const r = await this.#upload.complete();
      return { size, storedSize: framesEnd + index.length + TRAILER_SIZE, created: r.created };
    }
    // All frames raw: the frames region is the object exactly as it arrived.
    const r = await this.#upload.complete();
    return { size, storedSize: size, created: r.created };
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    await this.#chain.catch(() => undefined);
    if (this.#frame !== null) {
      frameBuffers.give(this.#frame);
      this.#frame = null;
    }
    await this.#upload.abort();
  }
}

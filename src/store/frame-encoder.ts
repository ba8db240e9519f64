import zstd from 'zstd-napi/binding.js';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { WorkerPool } from '../workers/pool.js';
import { Backlog } from './backlog.js';
import { AlignedBufferPool, BufferPool, ChunkGatherer, FRAME_SIZE } from './buffer-pool.js';
import { Codec, type FrameEntry } from './frame-format.js';
import type { StreamHash } from './hash-thread.js';
import { IncomingCheck } from './incoming-check.js';

/** Frames of one upload compressing or being stored at once before the socket is paused. */
const MAX_FRAMES_IN_FLIGHT = 2;
/**
 * Already-compressed assets (textures, video, archives) do not shrink, and trying costs a core.
 * After this many raw frames in a row an object is treated as incompressible: its frames are stored
 * raw without trying, except one probe every PROBE_EVERY frames, which turns trying back on if it
 * shrinks (an object whose head is compressed media and whose rest is not still gets compressed).
 */
const RAW_STREAK_GIVE_UP = 4;
const PROBE_EVERY = 8;

export const frameBuffers = new BufferPool(FRAME_SIZE, 16);
/**
 * An upload's frames as they arrive: shared with the workers (read in place, not moved) and aligned,
 * so a frame stored raw goes to disk with O_DIRECT straight from where it was gathered.
 */
export const uploadFrames = new AlignedBufferPool(FRAME_SIZE, { keep: 16, shared: true });
export const compressedBuffers = new BufferPool(zstd.compressBound(FRAME_SIZE), 16);

/**
 * Takes a frame's stored bytes (valid until the returned promise settles) and puts them after every
 * earlier frame's: a staging file on disk, a multipart upload in a bucket.
 */
export type FrameSink = (stored: Uint8Array) => Promise<void>;

/** A frame as encoded: its digest is null when it was stored raw untried and its digest deferred. */
export interface EncodedFrame {
  readonly storedLength: number;
  readonly codec: Codec;
  readonly digest: Uint8Array | null;
}

export interface EncodedObject {
  readonly size: number;
  readonly entries: readonly EncodedFrame[];
  /** Bytes of all stored frames (where the index starts). */
  readonly framesLength: number;
}

/** The entries of an encoder that digests every frame (no `deferRawDigests`). */
export function digested(entries: readonly EncodedFrame[]): FrameEntry[] {
  return entries.map((e) => {
    if (e.digest === null) throw new Error('frame digest was deferred');
    return { storedLength: e.storedLength, codec: e.codec, digest: e.digest };
  });
}

/**
 * The upload side of the framed format (frame-format.ts), whatever the store: bytes are checked
 * (IncomingCheck: counted in line, sha256 in line or on the hash thread), gathered into FRAME_SIZE
 * frames of shared memory, each full frame is compressed and BLAKE3-hashed on the worker pool while
 * the next one fills, and stored frames reach the sink in order. At most MAX_FRAMES_IN_FLIGHT
 * frames are outstanding (until stored and hashed); past that write() asks the caller to wait for
 * onDrain. The store decides what to do with the result (index and trailer, or plain).
 */
export class FrameEncoder {
  readonly #check: IncomingCheck;
  readonly #pool: WorkerPool;
  readonly #level: number;
  readonly #sink: FrameSink;
  readonly #gather = new ChunkGatherer(uploadFrames, (frame, length) => this.#submit(frame, length));
  /** Frames handed to the pool, in order; each settles once the sink took its bytes. */
  #chain: Promise<void> = Promise.resolve();
  readonly #backlog = new Backlog(MAX_FRAMES_IN_FLIGHT);
  #framesLength = 0;
  readonly #entries: EncodedFrame[] = [];
  #failed: unknown = null;
  #rawStreak = 0;
  #submitted = 0;
  readonly #deferRawDigests: boolean;

  /**
   * With `hash`, the hash thread hashes each frame while the pool compresses it (see HashThread).
   * With `deferRawDigests`, a frame stored raw without trying (an incompressible object) skips the
   * pool: its BLAKE3 is left null, for the sink's owner to compute from the stored bytes if the
   * framed form is kept. An incompressible object is stored exactly as it arrived, where frame
   * digests are never used, so this saves the pool a BLAKE3 pass (0.15 ms per MiB) and a round
   * trip per frame; only a sink that can read its frames back may ask for it.
   */
  constructor(oid: Oid, expected: number | null, pool: WorkerPool, level: number, sink: FrameSink, options: { hash?: StreamHash | null; deferRawDigests?: boolean } = {}) {
    this.#check = new IncomingCheck(oid, expected, options.hash ?? null);
    this.#pool = pool;
    this.#level = level;
    this.#sink = sink;
    this.#deferRawDigests = options.deferRawDigests ?? false;
  }

  write(chunk: Uint8Array): boolean {
    if (this.#failed !== null) throw this.#failed;
    try {
      this.#check.take(chunk);
    } catch (e) {
      throw (this.#failed = e);
    }
    this.#gather.add(chunk);
    return !this.#backlog.full();
  }

  onDrain(listener: () => void): void {
    this.#backlog.onDrain(listener);
  }

  /** Sends the filled frame to the pool; its bytes go to the sink after every earlier frame's. */
  #submit(input: Buffer, length: number): void {
    const release = this.#backlog.add(2, () => uploadFrames.giveView(input)); // stored and hashed
    this.#check.hashGathered(input.subarray(0, length), release);
    const attempt = this.#rawStreak < RAW_STREAK_GIVE_UP || this.#submitted % PROBE_EVERY === 0;
    this.#submitted++;
    const store = !attempt && this.#deferRawDigests ? this.#storeUntried(input, length) : this.#storeEncoded(input, length, attempt);
    this.#chain = this.#chain.then(store);
    this.#chain
      .catch((e: unknown) => {
        this.#failed ??= e;
      })
      .finally(release);
  }

  /** Starts the frame on the pool now; the returned step hands its stored bytes to the sink in turn. */
  #storeEncoded(input: Uint8Array, length: number, attempt: boolean): () => Promise<void> {
    const compressed = this.#pool.compress({ input, length, out: compressedBuffers.take(), level: this.#level, attempt });
    // A failure surfaces through the chain; this keeps a frame behind an earlier failure from
    // becoming an unhandled rejection.
    compressed.catch(() => undefined);
    return async () => {
      const r = await compressed;
      try {
        // `input` itself, not the result's copy of the view: the shared memory never left, and only
        // this view is known to the pool as aligned.
        await this.#sink(r.codec === Codec.Zstd ? new Uint8Array(r.out, 0, r.storedLength) : input.subarray(0, length));
        this.#framesLength += r.storedLength;
        this.#entries.push({ storedLength: r.storedLength, codec: r.codec, digest: r.digest });
        if (r.codec === Codec.Zstd) this.#rawStreak = 0;
        else if (attempt) this.#rawStreak++;
      } finally {
        compressedBuffers.give(r.out);
      }
    };
  }

  /** A frame stored raw without trying, its digest deferred (see the constructor). */
  #storeUntried(input: Uint8Array, length: number): () => Promise<void> {
    return async () => {
      await this.#sink(input.subarray(0, length));
      this.#framesLength += length;
      this.#entries.push({ storedLength: length, codec: Codec.Raw, digest: null });
    };
  }

  /** The whole body was given: stores the last frame, then checks size and digest. */
  async end(): Promise<EncodedObject> {
    if (this.#failed !== null) throw this.#failed;
    this.#gather.flush();
    await this.#chain;
    if (this.#failed !== null) throw this.#failed;
    await this.#check.verify();
    return { size: this.#check.count, entries: this.#entries, framesLength: this.#framesLength };
  }

  /** Stops: waits for frames in flight and gives the buffers back. */
  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    await this.#chain.catch(() => undefined);
    this.#gather.discard();
    this.#check.discard();
  }
}

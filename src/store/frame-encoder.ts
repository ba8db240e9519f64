import zstd from 'zstd-napi/binding.js';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import type { WorkerPool } from '../workers/pool.js';
import { Backlog } from './backlog.js';
import { AlignedBufferPool, BufferPool, ChunkGatherer, FRAME_SIZE } from './buffer-pool.js';
import { Codec, type FrameEntry } from './frame-format.js';
import type { StreamHash } from './hash-thread.js';
import { samplesShrink } from './frame-sample.js';
import { IncomingCheck } from './incoming-check.js';

/** Frames of one upload compressing or being stored at once before the socket is paused. */
const MAX_FRAMES_IN_FLIGHT = 2;

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
 * frames of shared memory, each full frame that samples say is worth it is compressed and
 * BLAKE3-hashed on the worker pool while the next one fills, and stored frames reach the sink in
 * order. At most MAX_FRAMES_IN_FLIGHT frames are outstanding (until stored and hashed); past that write() asks the caller to wait for
 * onDrain. The store decides what to do with the result (index and trailer, or plain).
 */
export class FrameEncoder {
  readonly #check: IncomingCheck;
  readonly #pool: WorkerPool;
  readonly #level: number;
  readonly #sink: FrameSink;
  readonly #gather = new ChunkGatherer(uploadFrames, (frame, length) => this.#submit(frame, length));
  /** Frames in order: each step settles once its stored bytes were handed to the sink. */
  #chain: Promise<void> = Promise.resolve();
  /** Settles once every frame handed to the sink was stored (sinks run concurrently, in order). */
  #stored: Promise<unknown> = Promise.resolve();
  readonly #backlog = new Backlog(MAX_FRAMES_IN_FLIGHT);
  #framesLength = 0;
  readonly #entries: EncodedFrame[] = [];
  #failed: unknown = null;
  /** The last frame tried on the pool was compressed: try the next one without sampling it. */
  #compressing = false;
  readonly #deferRawDigests: boolean;

  /**
   * With `hash`, the hash thread hashes each frame while the pool compresses it (see HashThread).
   * With `deferRawDigests`, a frame stored raw without trying (its samples did not shrink) skips the
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

  /**
   * Already-compressed assets (textures, video, archives) do not shrink, and trying costs a core.
   * So the filled frame is first judged by samples compressed in line (frame-sample.ts); only a
   * frame whose samples shrink goes to the pool to be compressed for real, the others are stored raw
   * untried, and while frames keep compressing the next one is tried without samples. Its bytes go
   * to the sink after every earlier frame's; the sink is not waited for before the next frame's
   * turn, so a frame's write overlaps the one before it, as a raw upload's do.
   */
  #submit(input: Buffer, length: number): void {
    const release = this.#backlog.add(2, () => uploadFrames.giveView(input)); // stored and hashed
    this.#check.hashGathered(input.subarray(0, length), release);
    const frame = input.subarray(0, length);
    const attempt = this.#compressing || samplesShrink(frame);
    // Untried and deferred, the frame needs no pool at all; otherwise the pool compresses it (or,
    // untried, only takes its BLAKE3) while the frames before it are stored.
    const encoded = !attempt && this.#deferRawDigests ? null : this.#pool.compress({ input, length, out: compressedBuffers.take(), level: this.#level, attempt });
    // A failure surfaces through the chain; this keeps a frame behind an earlier failure from
    // becoming an unhandled rejection.
    encoded?.catch(() => undefined);
    let handed = false;
    this.#chain = this.#chain.then(async () => {
      const r = encoded === null ? null : await encoded;
      if (r !== null && attempt) this.#compressing = r.codec === Codec.Zstd;
      // `input` itself, not the result's copy of the view: the shared memory never left, and only
      // this view is known to the pool as aligned.
      const stored = r?.codec === Codec.Zstd ? new Uint8Array(r.out, 0, r.storedLength) : frame;
      this.#framesLength += stored.byteLength;
      this.#entries.push({ storedLength: stored.byteLength, codec: r?.codec ?? Codec.Raw, digest: r?.digest ?? null });
      let sunk: Promise<void>;
      try {
        sunk = this.#sink(stored);
      } catch (e) {
        sunk = Promise.reject(e);
      }
      handed = true;
      const written = sunk.finally(() => {
        if (r !== null) compressedBuffers.give(r.out);
        release();
      });
      written.catch((e: unknown) => {
        this.#failed ??= e;
      });
      this.#stored = Promise.all([this.#stored, written]);
      this.#stored.catch(() => undefined); // reported by end(); never an unhandled rejection
    });
    this.#chain.catch((e: unknown) => {
      this.#failed ??= e;
      if (handed) return;
      // Never handed to the sink (it or an earlier frame failed): free what it holds.
      encoded?.then((r) => compressedBuffers.give(r.out), () => undefined);
      release();
    });
  }

  /** The whole body was given: stores the last frame, then checks size and digest. */
  async end(): Promise<EncodedObject> {
    if (this.#failed !== null) throw this.#failed;
    this.#gather.flush();
    await this.#chain;
    await this.#stored;
    if (this.#failed !== null) throw this.#failed;
    await this.#check.verify();
    return { size: this.#check.count, entries: this.#entries, framesLength: this.#framesLength };
  }

  /** Stops: waits for frames in flight and gives the buffers back. */
  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    await this.#chain.catch(() => undefined);
    await this.#stored.catch(() => undefined);
    this.#gather.discard();
    this.#check.discard();
  }
}

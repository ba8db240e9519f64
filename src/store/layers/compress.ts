import { blake3 } from '../../format/native-codecs.js';
import { lfsError } from '../../errors/errors.js';
import type { FrameCodec } from '../../format/frame-codec.js';
import { Codec, FRAME_SIZE, INDEX_ENTRY_SIZE, MIN_FRAMED_SIZE, TRAILER_SIZE, decodeTrailer, encodeIndex, encodeTrailer, readFrameIndex, type FrameEntry } from '../../format/frame-format.js';
import { samplesShrink } from '../../format/frame-sample.js';
import type { Oid } from '../../protocol/oid.js';
import { Backlog } from '../backlog.js';
import { ChunkGatherer, blockPool, compressedBuffers } from '../buffer-pool.js';
import { fillFrom } from '../fill-from.js';
import { FramedChunkSource } from '../framed-reader.js';
import type { BlobReader, BlobStat, BlobStore, InLineObject, ObjectWriter, Presigner, PutResult, WriterOptions } from '../types.js';
import { ForwardingBlobStore } from './forwarding.js';

/** Frames of one upload compressing or being stored at once before the caller is asked to wait. */
const MAX_FRAMES_IN_FLIGHT = 2;

/**
 * The compress layer: the one encoder and the one reader of the framed format
 * (format/frame-format.ts) for every backend. Objects of MIN_FRAMED_SIZE or more are written as
 * independent zstd frames of FRAME_SIZE logical bytes, each BLAKE3-hashed, then an index and a
 * trailer; a frame zstd does not shrink enough is stored raw, and an object none of whose frames
 * shrank is stored exactly as it arrived (no index), so raw and framed objects mix under the same
 * names. Reads probe the trailer, check each frame's BLAKE3 and decode on the FrameCodec.
 *
 * It must sit inside the verify layer: it sees the logical bytes, which verify has counted and is
 * hashing, and it never decides whether an object is good — only how it is stored.
 */
export class CompressingBlobStore extends ForwardingBlobStore {
  readonly #codec: FrameCodec;
  readonly #level: number | null;
  readonly #presigner: Presigner | null;

  /** `level` null: new objects are stored as they arrive, framed ones already stored are still read. */
  constructor(inner: BlobStore, codec: FrameCodec, level: number | null) {
    super(inner);
    this.#codec = codec;
    this.#level = level;
    const p = inner.presigner;
    // Objects this layer compresses only the server can decode: they are never presigned uploads.
    this.#presigner =
      p === null || level === null
        ? p
        : {
            compressFrom: MIN_FRAMED_SIZE,
            maxPresignedPut: p.maxPresignedPut,
            maxExpiresIn: p.maxExpiresIn,
            presignDownload: (oid, expiresIn) => p.presignDownload(oid, expiresIn),
            presignUpload: (repoKey, oid, expiresIn) => p.presignUpload(repoKey, oid, expiresIn),
            promoteIncoming: (repoKey, oid, size) => p.promoteIncoming(repoKey, oid, size),
          };
  }

  /** Whole frames when compressing (the verify layer above gathers into blocks of this size); otherwise the backend's. */
  override get blockSize(): number {
    return this.#level === null ? this.inner.blockSize : FRAME_SIZE;
  }

  override get presigner(): Presigner | null {
    return this.#presigner;
  }

  override async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    // Tiny objects are not worth a frame index: stored as they arrive.
    if (this.#level === null || (options.expectedSize !== null && options.expectedSize < MIN_FRAMED_SIZE)) return this.inner.createWriter(oid, options);
    const inner = await this.inner.createWriter(oid, { ...options, framed: true });
    return new FramedWriter(inner, this.#codec, this.#level, options.expectedSize);
  }

  override async open(oid: Oid): Promise<BlobReader | null> {
    const stored = await this.inner.open(oid);
    if (stored === null || stored.framed === false) return stored === null ? null : { ...plain(stored) };
    try {
      // The bytes below as this layer wrote them (`size`): a layer under it (encrypt) may store more.
      const index = await readFrameIndex(stored.size, (into, position) => stored.readAt(into, position));
      if (index === null) return plain(stored);
      const codec = this.#codec;
      return {
        size: index.logicalSize,
        storedSize: stored.storedSize,
        framed: true,
        read: (start, end) => new FramedChunkSource((position, into) => stored.readAt(into, position), index, codec, start, end),
        readAt: (into, position) => fillFrom(new FramedChunkSource((p, i) => stored.readAt(i, p), index, codec, position, position + into.byteLength - 1), into),
        close: () => stored.close(),
      };
    } catch (e) {
      await stored.close();
      throw e;
    }
  }

  override openInLine(oid: Oid): InLineObject | undefined {
    const held = this.inner.openInLine?.(oid);
    if (held === undefined || held.bytes.byteLength < TRAILER_SIZE) return held;
    // Bytes that end in a frame trailer are frames to decode, or plain bytes that only look so: open
    // tells which (the index and its digest), as it does for any object.
    if (decodeTrailer(held.bytes.subarray(held.bytes.byteLength - TRAILER_SIZE), held.bytes.byteLength) === null) return held;
    held.release();
    return undefined;
  }

  override async stat(oid: Oid): Promise<BlobStat | null> {
    // Absent, or known plain by the backend: no need to open it (the journal asks this of every
    // object it writes out, and most are not there yet).
    const below = await this.inner.stat(oid);
    if (below === null || below.framed === false) return below;
    const r = await this.open(oid);
    if (r === null) return null;
    await r.close();
    return { size: r.size, storedSize: r.storedSize, framed: r.framed };
  }
}

/** A stored object the trailer probe found plain: served as it is. */
function plain(stored: BlobReader): BlobReader {
  return { size: stored.size, storedSize: stored.storedSize, framed: false, read: (s, e) => stored.read(s, e), readAt: (i, p) => stored.readAt(i, p), close: () => stored.close() };
}

/**
 * Writes one object as frames into the inner writer. Whole frames handed down with `release` from
 * aligned shared memory (the verify layer's blocks) are used in place; other chunks are gathered into
 * frames of that memory. Each frame is first judged by samples compressed in line
 * (format/frame-sample.ts): already-compressed assets (textures, video, archives) do not shrink and
 * trying costs a core; a frame whose samples shrink is compressed on the codec, the others are only
 * BLAKE3-hashed there; while frames keep compressing the next one is tried without samples. Stored
 * frames reach the inner writer in order; at most MAX_FRAMES_IN_FLIGHT are outstanding.
 *
 * The framed form must be smaller than the object, or the object is stored as it arrived. Since a
 * backend cannot rewrite what it was given (a bucket key in particular), that is decided frame by
 * frame: the first frame to be stored compressed must by itself save what the index and trailer
 * cost, or it is stored raw (its BLAKE3 is then taken in line, once); after it, every frame zstd
 * shrinks is kept compressed. With the size unknown (chunked without a hint) the cost is reckoned on
 * the frames seen so far, so a framed object may come out a few bytes larger than the plain one.
 */
class FramedWriter implements ObjectWriter {
  readonly #inner: ObjectWriter;
  readonly #codec: FrameCodec;
  readonly #level: number;
  readonly #pool = blockPool(FRAME_SIZE);
  readonly #gather = new ChunkGatherer(this.#pool, (frame, length) => this.#submit(frame, length, () => this.#pool.giveView(frame)));
  /** Frames in order: each step settles once its stored bytes were handed to the inner writer. */
  #chain: Promise<void> = Promise.resolve();
  /** Settles once every frame handed down was taken (released) by the inner writer. */
  #stored: Promise<unknown> = Promise.resolve();
  readonly #backlog = new Backlog(MAX_FRAMES_IN_FLIGHT);
  #size = 0;
  #framesLength = 0;
  readonly #entries: FrameEntry[] = [];
  #failed: unknown = null;
  /** The last frame tried on the codec was compressed: try the next one without sampling it. */
  #compressing = false;
  /** Waiters for the inner writer's drain (it asked to wait). */
  #innerDrain: (() => void)[] = [];
  readonly #expectedSize: number | null;
  /** A frame kept compressed has saved what the index and trailer cost (see the class comment). */
  #paidFor = false;

  constructor(inner: ObjectWriter, codec: FrameCodec, level: number, expectedSize: number | null) {
    this.#inner = inner;
    this.#codec = codec;
    this.#level = level;
    this.#expectedSize = expectedSize;
    inner.onDrain(() => {
      for (const w of this.#innerDrain.splice(0)) w();
    });
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    if (this.#failed !== null) {
      release?.();
      throw this.#failed;
    }
    this.#size += chunk.byteLength;
    // A whole frame of shared memory at a frame boundary: the codec reads it in place, no copy.
    if (release !== undefined && chunk.byteLength === FRAME_SIZE && this.#gather.empty && chunk.buffer instanceof SharedArrayBuffer) {
      this.#submit(chunk, FRAME_SIZE, release);
    } else {
      try {
        this.#gather.add(chunk);
      } finally {
        release?.();
      }
    }
    return !this.#backlog.full();
  }

  onDrain(listener: () => void): void {
    this.#backlog.onDrain(listener);
  }

  /** Hands a frame's stored bytes to the inner writer; resolves once it released them and can take more. */
  #sink(stored: Uint8Array): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let released = false;
      let ready = true;
      const settle = (): void => {
        if (released && ready) resolve();
      };
      try {
        ready = this.#inner.write(stored, () => {
          released = true;
          settle();
        });
      } catch (e) {
        reject(e);
        return;
      }
      if (!ready) {
        this.#innerDrain.push(() => {
          ready = true;
          settle();
        });
      }
    });
  }

  #submit(input: Uint8Array, length: number, free: () => void): void {
    const release = this.#backlog.add(1, free);
    const frame = input.subarray(0, length);
    const attempt = this.#compressing || samplesShrink(frame);
    const encoded = this.#codec.compress({ input, length, out: compressedBuffers.take(), level: this.#level, attempt });
    // A failure surfaces through the chain; this keeps a frame behind an earlier failure from
    // becoming an unhandled rejection.
    encoded.catch(() => undefined);
    let handed = false;
    this.#chain = this.#chain.then(async () => {
      const r = await encoded;
      if (attempt) this.#compressing = r.codec === Codec.Zstd;
      let codec = r.codec as Codec;
      let digest = r.digest;
      if (codec === Codec.Zstd && !this.#paidFor) {
        if (length - r.storedLength >= this.#overhead()) this.#paidFor = true;
        else {
          codec = Codec.Raw;
          digest = new Uint8Array(blake3(Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength)));
        }
      }
      // `input` itself, not the result's copy of the view: shared memory never left, and only this
      // view is known as aligned (O_DIRECT below).
      const stored = codec === Codec.Zstd ? new Uint8Array(r.out, 0, r.storedLength) : frame;
      this.#framesLength += stored.byteLength;
      this.#entries.push({ storedLength: stored.byteLength, codec, digest });
      handed = true;
      const written = this.#sink(stored).finally(() => {
        compressedBuffers.give(r.out);
        release();
      });
      written.catch((e: unknown) => {
        this.#failed ??= e;
      });
      this.#stored = Promise.all([this.#stored, written]);
      this.#stored.catch(() => undefined); // reported by finish(); never an unhandled rejection
    });
    this.#chain.catch((e: unknown) => {
      this.#failed ??= e;
      if (handed) return;
      // Never handed down (it or an earlier frame failed): free what it holds.
      encoded.then((r) => compressedBuffers.give(r.out), () => undefined);
      release();
    });
  }

  /** Bytes the index and trailer will take. */
  #overhead(): number {
    const frames = this.#expectedSize !== null ? Math.ceil(this.#expectedSize / FRAME_SIZE) : this.#entries.length + 1;
    return frames * INDEX_ENTRY_SIZE + TRAILER_SIZE;
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    this.#gather.flush();
    await this.#chain;
    await this.#stored;
    if (this.#failed !== null) throw this.#failed;
    const size = this.#size;
    if (this.#entries.every((e) => e.codec === Codec.Raw)) {
      // All frames raw: the frames region is the object exactly as it arrived; no index.
      const r = await this.#inner.finish();
      return { size, storedSize: r.storedSize, created: r.created };
    }
    const index = encodeIndex(this.#entries);
    const tail = Buffer.concat([index, encodeTrailer(FRAME_SIZE, size, this.#entries.length, this.#framesLength, index)]);
    await this.#sink(tail);
    const r = await this.#inner.finish();
    // What the store below holds: the frames, index and trailer, plus whatever a layer under this one adds.
    return { size, storedSize: r.storedSize, created: r.created };
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    await this.#chain.catch(() => undefined);
    await this.#stored.catch(() => undefined);
    this.#gather.discard();
    await this.#inner.abort();
  }
}

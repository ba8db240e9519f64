import { blake3 } from '@napi-rs/blake-hash';
import zstd from 'zstd-napi/binding.js';
import type { Oid } from '../protocol/oid.js';
import type { WorkerPool } from '../workers/pool.js';
import { FRAME_SIZE } from './buffer-pool.js';
import { FrameEncoder, frameBuffers, type EncodedFrame } from './frame-encoder.js';
import type { StreamHash } from './hash-thread.js';
import { Codec, INDEX_ENTRY_SIZE, TRAILER_SIZE, encodeIndex, encodeTrailer, type FrameEntry } from './frame-format.js';
import type { CommitFn } from './raw-writer.js';
import type { StagingFile } from './staging-file.js';
import type { ObjectWriter, PutResult } from './types.js';

export { compressedBuffers, frameBuffers } from './frame-encoder.js';

/**
 * Writes an upload as independent zstd frames into a staging file (FrameEncoder does the framing).
 * At the end the framed form is kept only if it is smaller than the object; otherwise the object is
 * stored exactly as it arrived — without a copy when every frame stayed raw, since frames come first.
 */
export class FramedWriter implements ObjectWriter {
  readonly #file: StagingFile;
  readonly #commit: CommitFn;
  readonly #encoder: FrameEncoder;
  #position = 0;

  constructor(oid: Oid, expected: number | null, file: StagingFile, commit: CommitFn, pool: WorkerPool, level: number, hash: StreamHash | null = null) {
    this.#file = file;
    this.#commit = commit;
    this.#encoder = new FrameEncoder(oid, expected, pool, level, (stored) => this.#append(stored), { hash, deferRawDigests: true });
  }

  /** Frames arrive in order: each goes right after the previous one. */
  #append(stored: Uint8Array): Promise<void> {
    const position = this.#position;
    this.#position += stored.byteLength;
    return new Promise<void>((resolve, reject) =>
      this.#file.write(stored, position, () => (this.#file.error === null ? resolve() : reject(this.#file.error))),
    );
  }

  write(chunk: Uint8Array): boolean {
    return this.#encoder.write(chunk);
  }

  onDrain(listener: () => void): void {
    this.#encoder.onDrain(listener);
  }

  async finish(): Promise<PutResult> {
    const { size, entries: encoded, framesLength } = await this.#encoder.end();
    if (encoded.every((e) => e.codec === Codec.Raw)) {
      // All frames raw: the frames region is the object exactly as it arrived (no index, so the
      // digests the encoder deferred are never needed).
      await this.#file.seal(size);
      return this.#commit(this.#file, { size, storedSize: size });
    }
    const framedSize = framesLength + encoded.length * INDEX_ENTRY_SIZE + TRAILER_SIZE;
    if (framedSize < size) {
      const entries = await this.#digestDeferred(encoded);
      const index = encodeIndex(entries);
      const trailer = encodeTrailer(FRAME_SIZE, size, entries.length, framesLength, index);
      await this.#append(Buffer.concat([index, trailer]));
      await this.#file.seal(framedSize);
      return this.#commit(this.#file, { size, storedSize: framedSize });
    }
    // Some frames shrank but the whole did not (index overhead on a tiny object): store it plain.
    await this.#rewritePlain(encoded, size);
    return this.#commit(this.#file, { size, storedSize: size });
  }

  /**
   * The framed form is kept and some raw frames went in untried (their samples did not shrink, but
   * other frames compressed): their BLAKE3 comes from the bytes as stored, read back one frame at a
   * time.
   */
  async #digestDeferred(encoded: readonly EncodedFrame[]): Promise<FrameEntry[]> {
    if (encoded.every((e) => e.digest !== null)) return encoded as FrameEntry[];
    await this.#file.settled();
    const storedAt = storedOffsets(encoded);
    const buf = frameBuffers.take();
    try {
      const entries: FrameEntry[] = [];
      for (const [i, e] of encoded.entries()) {
        const digest = e.digest ?? new Uint8Array(blake3(await this.#readBack(buf, storedAt[i]!, e.storedLength)));
        entries.push({ storedLength: e.storedLength, codec: e.codec, digest });
      }
      return entries;
    } finally {
      frameBuffers.give(buf);
    }
  }

  /** A frame's stored bytes, read back from the staging file into `buf`. */
  async #readBack(buf: ArrayBuffer, at: number, length: number): Promise<Buffer> {
    const stored = Buffer.from(buf, 0, length);
    if ((await this.#file.read(stored, at)) !== length) throw new Error('staging file shorter than its frames');
    return stored;
  }

  /**
   * Rare path (a last frame that shrank by a few per cent, less than the index costs): the frames
   * are turned back into the plain object in place, one frame in memory at a time whatever the
   * object's size. From the last frame to the first: a frame's plain bytes start at or after its
   * stored bytes (frames before it only ever shrank), so writing them never touches a frame still
   * to be read; a raw frame already at its plain offset stays where it is.
   */
  async #rewritePlain(entries: readonly EncodedFrame[], size: number): Promise<void> {
    await this.#file.settled();
    const storedAt = storedOffsets(entries);
    const input = frameBuffers.take();
    const output = frameBuffers.take();
    try {
      for (let i = entries.length - 1; i >= 0; i--) {
        const e = entries[i]!;
        const plainAt = i * FRAME_SIZE;
        const length = Math.min(FRAME_SIZE, size - plainAt);
        if (e.codec === Codec.Raw && storedAt[i] === plainAt) continue;
        const stored = await this.#readBack(input, storedAt[i]!, e.storedLength);
        const plain = e.codec === Codec.Zstd ? new Uint8Array(output, 0, zstd.decompress(new Uint8Array(output), stored)) : stored;
        if (plain.byteLength !== length) throw new Error(`frame ${i} holds ${plain.byteLength} bytes, not ${length}`);
        await new Promise<void>((resolve) => this.#file.write(plain, plainAt, resolve));
        await this.#file.settled();
      }
    } finally {
      frameBuffers.give(input);
      frameBuffers.give(output);
    }
    await this.#file.seal(size);
  }

  async abort(): Promise<void> {
    await this.#encoder.abort();
    await this.#file.dispose();
  }
}

/** Where each frame's stored bytes start in the staging file (frames come first, in order). */
function storedOffsets(entries: readonly EncodedFrame[]): number[] {
  const offsets: number[] = [];
  let at = 0;
  for (const e of entries) {
    offsets.push(at);
    at += e.storedLength;
  }
  return offsets;
}

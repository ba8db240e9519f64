import { blake3 } from './native-codecs.js';

/**
 * The framed (compressed) object format:
 *
 *   [frame 0][frame 1]…[frame n-1][index: n × 37 bytes][trailer: 64 bytes]
 *
 * Each frame holds FRAME_SIZE logical bytes (the last fewer), as one zstd frame or raw when zstd saves
 * too little. An index entry is the stored length (u32), codec (u8) and BLAKE3 of the stored bytes
 * (32), so a damaged frame is caught before decompression. The trailer names the format and carries
 * the index's BLAKE3, so a plain object is never mistaken for a framed one. Frames come first, so an
 * all-raw framed file truncated at the logical size is the plain object, without a copy.
 */
export const TRAILER_SIZE = 64;
export const INDEX_ENTRY_SIZE = 37;
const MAGIC = Buffer.from('STWFRMv1', 'latin1');
const VERSION = 1;

export const enum Codec {
  Raw = 0,
  Zstd = 1,
}

export interface FrameEntry {
  readonly storedLength: number;
  readonly codec: Codec;
  readonly digest: Uint8Array;
}

export interface FrameIndex {
  readonly frameSize: number;
  readonly logicalSize: number;
  readonly frames: readonly FrameEntry[];
  readonly offsets: readonly number[];
  readonly fileSize: number;
}

export function encodeIndex(frames: readonly FrameEntry[]): Buffer {
  const out = Buffer.alloc(frames.length * INDEX_ENTRY_SIZE);
  frames.forEach((f, i) => {
    const at = i * INDEX_ENTRY_SIZE;
    out.writeUInt32LE(f.storedLength, at);
    out.writeUInt8(f.codec, at + 4);
    out.set(f.digest, at + 5);
  });
  return out;
}

export function encodeTrailer(frameSize: number, logicalSize: number, frameCount: number, indexOffset: number, index: Buffer): Buffer {
  const t = Buffer.alloc(TRAILER_SIZE);
  MAGIC.copy(t, 0);
  t.writeUInt32LE(VERSION, 8);
  t.writeUInt32LE(frameSize, 12);
  t.writeBigUInt64LE(BigInt(logicalSize), 16);
  t.writeBigUInt64LE(BigInt(frameCount), 24);
  t.writeBigUInt64LE(BigInt(indexOffset), 32);
  blake3(index).copy(t, 40, 0, 16);
  MAGIC.copy(t, 56);
  return t;
}

export interface Trailer {
  readonly frameSize: number;
  readonly logicalSize: number;
  readonly frameCount: number;
  readonly indexOffset: number;
  readonly indexDigest: Buffer;
}

/** The trailer of a framed file, or null when these 64 bytes are not one (a plain object). */
export function decodeTrailer(t: Buffer, fileSize: number): Trailer | null {
  if (t.length !== TRAILER_SIZE || !t.subarray(0, 8).equals(MAGIC) || !t.subarray(56, 64).equals(MAGIC)) return null;
  if (t.readUInt32LE(8) !== VERSION) return null;
  const frameSize = t.readUInt32LE(12);
  const logicalSize = Number(t.readBigUInt64LE(16));
  const frameCount = Number(t.readBigUInt64LE(24));
  const indexOffset = Number(t.readBigUInt64LE(32));
  if (frameSize === 0 || frameCount !== Math.ceil(logicalSize / frameSize)) return null;
  if (indexOffset + frameCount * INDEX_ENTRY_SIZE + TRAILER_SIZE !== fileSize) return null;
  return { frameSize, logicalSize, frameCount, indexOffset, indexDigest: Buffer.from(t.subarray(40, 56)) };
}

export function decodeIndex(index: Buffer, trailer: Trailer): FrameIndex | null {
  if (index.length !== trailer.frameCount * INDEX_ENTRY_SIZE) return null;
  if (!blake3(index).subarray(0, 16).equals(trailer.indexDigest)) return null;
  const frames: FrameEntry[] = [];
  const offsets: number[] = [];
  let at = 0;
  for (let i = 0; i < trailer.frameCount; i++) {
    const e = i * INDEX_ENTRY_SIZE;
    const codec = index.readUInt8(e + 4);
    if (codec !== Codec.Raw && codec !== Codec.Zstd) return null;
    const entry: FrameEntry = { storedLength: index.readUInt32LE(e), codec, digest: Buffer.from(index.subarray(e + 5, e + 37)) };
    offsets.push(at);
    at += entry.storedLength;
    frames.push(entry);
  }
  if (at !== trailer.indexOffset) return null;
  return { frameSize: trailer.frameSize, logicalSize: trailer.logicalSize, frames, offsets, fileSize: trailer.indexOffset + index.length + TRAILER_SIZE };
}

export function frameLength(index: Pick<FrameIndex, 'frameSize' | 'logicalSize'>, i: number): number {
  return Math.min(index.frameSize, index.logicalSize - i * index.frameSize);
}

/** Logical bytes per frame of new objects (the trailer records it): bounds memory per transfer. */
export const FRAME_SIZE = 2 << 20;

/** Objects smaller than this are always stored as they arrive: not worth a frame index. */
export const MIN_FRAMED_SIZE = 4096;

/** Reads positioned bytes of a stored object into `into`, all of it or throws (a file, a ranged GET). */
export type ReadAt = (into: Buffer, position: number) => Promise<void>;

/** The one reader of a stored object's frame index (trailer, then index); null for a plain object. */
export async function readFrameIndex(storedSize: number, readAt: ReadAt): Promise<FrameIndex | null> {
  if (storedSize < TRAILER_SIZE) return null;
  const t = Buffer.alloc(TRAILER_SIZE);
  await readAt(t, storedSize - TRAILER_SIZE);
  const trailer = decodeTrailer(t, storedSize);
  if (trailer === null) return null;
  const index = Buffer.alloc(trailer.frameCount * INDEX_ENTRY_SIZE);
  await readAt(index, trailer.indexOffset);
  return decodeIndex(index, trailer);
}

import { frameGcm, type FrameGcm } from '../crypto/frame-gcm.js';
import { lfsError } from '../errors/errors.js';

/**
 * The encrypted object format (docs/encryption.md), version 1:
 *
 *     header (48 bytes) | frame 0 | frame 1 | … | frame n-1 (the final frame)
 *
 * Header: magic (16) | version u8 = 1 | cipher u8 = 1 (AES-256-GCM) | 2 zero bytes | frame size u32
 * BE (plaintext bytes per frame) | dataKeyId (16 bytes, the index row's id in hex) | 8 zero bytes.
 * Frame i: AES-256-GCM of plaintext bytes [i·F, min((i+1)·F, size)) under the object copy's data
 * key, then its 16-byte tag. Every frame but the last is full; an empty object is one empty final
 * frame. Nonce: 4 zero bytes | i as u64 BE (one random key per copy: a nonce never repeats under it).
 * AAD: the header | the oid (32 bytes) | i as u64 BE | 1 for the final frame, else 0. So a frame
 * moved to another position, object or copy, a dropped or added frame and any header change all
 * fail authentication, and the final frame proves where the object ends.
 */
export const MAGIC = Buffer.from('\x89STOWAGE-CRYPT\r\n', 'latin1');
export const HEADER_SIZE = 48;
export const TAG_SIZE = 16;
export const FORMAT_VERSION = 1;
const CIPHER_AES_256_GCM = 1;
/**
 * Plaintext bytes per frame of new objects: a range read decrypts at most one frame more than it
 * returns at each end. 256 KiB: a cipher set up per frame costs little beside its bytes, and the
 * frame (with its output) stays in the CPU's cache. Objects keep the frame size their header names.
 */
export const CRYPT_FRAME_SIZE = 256 << 10;
const MIN_FRAME = 4 << 10;
const MAX_FRAME = 16 << 20;
/**
 * Bytes of MAGIC a stored object must match to be taken for encrypted. Not all 16: a flipped byte in
 * the magic must fail as a damaged encrypted object, never pass for a plain one (its ciphertext
 * served as content). Plain content matching 12 of these 16 bytes does not occur by chance.
 */
const MAGIC_MATCH = 12;

export interface CryptHeader {
  readonly frameSize: number;
  /** 32 hex digits. */
  readonly dataKeyId: string;
  /** The header's bytes, bound into every frame's AAD. */
  readonly bytes: Buffer;
}

/** Where an encrypted object's frames are, from its stored size and frame size. */
export interface CryptGeometry {
  readonly frameSize: number;
  readonly frames: number;
  /** Logical (plaintext) size. */
  readonly size: number;
  readonly storedSize: number;
}

export function encodeHeader(frameSize: number, dataKeyId: string): Buffer {
  const h = Buffer.alloc(HEADER_SIZE);
  MAGIC.copy(h, 0);
  h.writeUInt8(FORMAT_VERSION, 16);
  h.writeUInt8(CIPHER_AES_256_GCM, 17);
  h.writeUInt32BE(frameSize, 20);
  h.write(dataKeyId, 24, 16, 'hex');
  return h;
}

/** Whether stored bytes starting with `head` (≥ 16 bytes) are to be read as an encrypted object (see MAGIC_MATCH). */
export function looksEncrypted(head: Uint8Array, storedSize: number): boolean {
  if (storedSize < HEADER_SIZE + TAG_SIZE || head.byteLength < MAGIC.length) return false;
  let same = 0;
  for (let i = 0; i < MAGIC.length; i++) if (head[i] === MAGIC[i]) same++;
  return same >= MAGIC_MATCH;
}

/** The object is damaged (or not what its header says): an error a download and an audit report as such. */
export function damaged(detail: string): Error {
  return lfsError('LFS_ERR_OBJECT_DAMAGED', `Stored encrypted object is damaged (${detail}); the object needs an audit`);
}

/** Parses a header strictly; throws `damaged` on anything but a version-1 header. */
export function decodeHeader(bytes: Uint8Array): CryptHeader {
  const h = Buffer.from(bytes.buffer, bytes.byteOffset, HEADER_SIZE);
  if (!h.subarray(0, 16).equals(MAGIC)) throw damaged('header magic');
  if (h[16] !== FORMAT_VERSION || h[17] !== CIPHER_AES_256_GCM) throw damaged(`format ${h[16]}.${h[17]}`);
  if (h.readUInt16BE(18) !== 0 || !h.subarray(40, 48).equals(Buffer.alloc(8))) throw damaged('header reserved bytes');
  const frameSize = h.readUInt32BE(20);
  if (frameSize < MIN_FRAME || frameSize > MAX_FRAME) throw damaged('header frame size');
  return { frameSize, dataKeyId: h.toString('hex', 24, 40), bytes: Buffer.from(h) };
}

export function storedSizeOf(size: number, frameSize: number): number {
  return HEADER_SIZE + size + framesOf(size, frameSize) * TAG_SIZE;
}

function framesOf(size: number, frameSize: number): number {
  return Math.max(1, Math.ceil(size / frameSize));
}

/** The frames a stored size holds; throws `damaged` when no object of whole frames has that size. */
export function geometry(storedSize: number, frameSize: number): CryptGeometry {
  const payload = storedSize - HEADER_SIZE;
  if (payload < TAG_SIZE) throw damaged('shorter than one frame');
  const full = frameSize + TAG_SIZE;
  const frames = Math.ceil(payload / full);
  const last = payload - (frames - 1) * full - TAG_SIZE;
  if (last < 0 || (last === 0 && frames > 1)) throw damaged('cut inside a frame');
  return { frameSize, frames, size: (frames - 1) * frameSize + last, storedSize };
}

/** Stored offset of frame i. */
export function frameOffset(g: CryptGeometry, i: number): number {
  return HEADER_SIZE + i * (g.frameSize + TAG_SIZE);
}

/** Plaintext bytes of frame i. */
export function framePlainLength(g: CryptGeometry, i: number): number {
  return i === g.frames - 1 ? g.size - i * g.frameSize : g.frameSize;
}

/**
 * The AES-256-GCM of one object copy's frames: its key, header and oid, with the nonce and the AAD
 * built once and only their frame fields rewritten per frame. Each frame is sealed or opened in one
 * call into a buffer the caller owns (crypto/frame-gcm.ts).
 */
export class FrameCipher {
  readonly #key: Buffer;
  readonly #gcm: FrameGcm;
  readonly #nonce = Buffer.alloc(12);
  readonly #aad: Buffer;
  readonly #at: number;

  constructor(key: Uint8Array, header: Buffer, oidBytes: Buffer, gcm: FrameGcm = frameGcm()) {
    this.#key = Buffer.from(key);
    this.#gcm = gcm;
    this.#at = header.byteLength + 32;
    this.#aad = Buffer.alloc(this.#at + 9);
    header.copy(this.#aad, 0);
    oidBytes.copy(this.#aad, header.byteLength);
  }

  #frame(i: number, final: boolean): void {
    this.#nonce.writeBigUInt64BE(BigInt(i), 4);
    this.#aad.writeBigUInt64BE(BigInt(i), this.#at);
    this.#aad[this.#at + 8] = final ? 1 : 0;
  }

  /** Writes frame i's stored bytes (ciphertext, then tag) for `plain` into `out`, plain.byteLength + TAG_SIZE bytes. */
  sealInto(i: number, final: boolean, plain: Uint8Array, out: Uint8Array): void {
    this.#frame(i, final);
    this.#gcm.seal(this.#key, this.#nonce, this.#aad, plain, out);
  }

  /**
   * Writes frame i's plaintext into `out` (its framePlainLength bytes; it may be `stored` itself)
   * from its stored bytes; throws `damaged` when they do not authenticate, nothing of them left in `out`.
   */
  openInto(g: CryptGeometry, i: number, stored: Uint8Array, out: Uint8Array): void {
    const length = framePlainLength(g, i);
    if (stored.byteLength !== length + TAG_SIZE) throw damaged(`frame ${i} length`);
    this.#frame(i, i === g.frames - 1);
    if (!this.#gcm.open(this.#key, this.#nonce, this.#aad, stored, out.subarray(0, length))) throw damaged(`frame ${i} does not authenticate`);
  }


}

import { createCipheriv, createDecipheriv } from 'node:crypto';
import { copyBytes } from '../store/buffer-pool.js';
import { loadNativeAddon, type Loaded } from '../util/native-addon.js';

/** AES-256-GCM of one frame into a buffer the caller owns: what src/native/frame-cipher.cc exports, and its node:crypto fallback. */
export interface FrameGcm {
  /** `out` (plain.byteLength + 16 bytes; plain's own bytes or apart) gets the ciphertext, then the tag. */
  seal(key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, plain: Uint8Array, out: Uint8Array): void;
  /**
   * True when `stored` (ciphertext, then the tag) authenticates, `out` (16 bytes shorter; stored's
   * own bytes or apart) then holding the plaintext; false with `out` zeroed.
   */
  open(key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, stored: Uint8Array, out: Uint8Array): boolean;
  /**
   * Whose AES-256-GCM it is: 'vaes-avx512' or 'vaes-avx2' (src/native/gcm-vaes.cc, on CPUs with VAES and VPCLMULQDQ,
   * once it matched OpenSSL in a self-test), 'openssl' (node's own, through the addon), 'node:crypto'.
   */
  readonly engine: string;
  /** OpenSSL's AES-256-GCM from now on, even where the vector one runs (SVC_ENCRYPTION_CIPHER=openssl). */
  preferOpenSsl(): void;
}

const TAG = 16;

/**
 * node:crypto's AES-256-GCM, the same cipher as the addon's (one OpenSSL): used where the addon was
 * not built. Its outputs are allocated per call, so it feeds them 64 KiB at a time (larger outputs
 * are fresh pages to fault in).
 */
export const nodeFrameGcm: FrameGcm = { seal: nodeSeal, open: nodeOpen, engine: 'node:crypto', preferOpenSsl: () => undefined };

function nodeSeal(key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, plain: Uint8Array, out: Uint8Array): void {
  if (out.byteLength !== plain.byteLength + TAG) throw new TypeError('out must be plain.byteLength + 16 bytes');
  const c = createCipheriv('aes-256-gcm', key, nonce);
  c.setAAD(aad);
  let at = 0;
  for (let i = 0; i < plain.byteLength; i += PIECE) at = put(out, at, c.update(plain.subarray(i, i + PIECE)));
  at = put(out, at, c.final());
  put(out, at, c.getAuthTag());
}

function nodeOpen(key: Uint8Array, nonce: Uint8Array, aad: Uint8Array, stored: Uint8Array, out: Uint8Array): boolean {
  const length = stored.byteLength - TAG;
  if (length < 0 || out.byteLength !== length) throw new TypeError('out must be stored.byteLength - 16 bytes');
  const d = createDecipheriv('aes-256-gcm', key, nonce);
  d.setAAD(aad);
  d.setAuthTag(stored.slice(length)); // a copy: an in-place open overwrites nothing past `length`, but say so
  let at = 0;
  try {
    for (let i = 0; i < length; i += PIECE) at = put(out, at, d.update(stored.subarray(i, Math.min(length, i + PIECE))));
    put(out, at, d.final());
    return true;
  } catch {
    out.fill(0);
    return false;
  }
}
const PIECE = 64 << 10;

function put(out: Uint8Array, at: number, bytes: Uint8Array): number {
  copyBytes(out, at, bytes);
  return at + bytes.byteLength;
}

let loaded: Loaded<FrameGcm> | undefined;

const addon = (): Loaded<FrameGcm> => (loaded ??= loadNativeAddon<FrameGcm>('frame_cipher.node'));

/** The addon `scripts/build-native.mjs` builds into dist/native when it loads, else node:crypto. */
export function frameGcm(): FrameGcm {
  return addon().addon ?? nodeFrameGcm;
}

/** SVC_ENCRYPTION_CIPHER: `openssl` keeps frames on OpenSSL's AES-256-GCM (the default, `auto`, takes the CPU's vector one where it passed its self-test). */
export function chooseFrameCipher(cipher: 'auto' | 'openssl'): void {
  if (cipher === 'openssl') frameGcm().preferOpenSsl();
}

/** Which AES-256-GCM frames are sealed and opened with (FrameGcm.engine). */
export function frameGcmEngine(): string {
  return frameGcm().engine;
}

/** Why frames are sealed with node:crypto rather than the addon ('' when the addon loaded). */
export function frameGcmMissing(): string {
  return addon().missing;
}

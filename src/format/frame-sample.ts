import type { CCtx } from 'zstd-napi/binding.js';
import { zstd } from './native-codecs.js';

/** A frame is stored raw unless zstd saves at least this share of it (uploads and the compress job). */
export const MIN_FRAME_SAVING = 0.05;

/** Slices of a frame sampled (start, middle, end), their size, and the least share they must save. */
const SAMPLES = 3;
const SAMPLE_SIZE = 16 << 10;
const SAMPLE_MIN_SAVING = 0.03;

let cctx: CCtx | null = null;
let scratch: Uint8Array | null = null;

/**
 * A quick guess whether a frame is worth compressing, on the thread that gathers it: SAMPLES slices
 * of SAMPLE_SIZE bytes compressed at level 1 must save SAMPLE_MIN_SAVING; the real try then applies
 * MIN_FRAME_SAVING. zstd gives up on incompressible bytes fast, far cheaper than a full attempt on
 * the pool; on compressible bytes the samples cost more, so a caller that has just seen frames
 * compress skips them. A frame no bigger than the samples is simply tried.
 */
export function samplesShrink(frame: Uint8Array): boolean {
  if (frame.byteLength <= SAMPLES * SAMPLE_SIZE) return true;
  cctx ??= new (zstd().CCtx)();
  scratch ??= new Uint8Array(zstd().compressBound(SAMPLE_SIZE));
  let stored = 0;
  for (let i = 0; i < SAMPLES; i++) {
    const at = Math.floor(((frame.byteLength - SAMPLE_SIZE) * i) / (SAMPLES - 1));
    stored += cctx.compress(scratch, frame.subarray(at, at + SAMPLE_SIZE), 1);
  }
  return stored <= SAMPLES * SAMPLE_SIZE * (1 - SAMPLE_MIN_SAVING);
}

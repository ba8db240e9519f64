import zstd from 'zstd-napi/binding.js';

/**
 * A quick guess whether a frame is worth compressing, on the thread that gathers it: `samples`
 * slices of `sampleSize` bytes (spread from the frame's start to its end) compressed at level 1. On
 * incompressible bytes zstd gives up fast (3 × 16 KiB: ~20 µs), far cheaper than a round trip to
 * the pool and a full attempt there (zstd:3 on a 2 MiB frame: ~1 ms of a worker); on compressible
 * bytes it costs ~120 µs, which is why a caller that has just seen frames compress skips it.
 */
export interface Sampling {
  readonly samples: number;
  readonly sampleSize: number;
  /** Least share the samples must save for the frame to be worth a real try. */
  readonly minSaving: number;
}

/**
 * How uploads and the compress job judge a frame: three 16 KiB samples (start, middle, end) must
 * save 3%; the real try then applies the 5% rule.
 */
export const FRAME_SAMPLING: Sampling = { samples: 3, sampleSize: 16 << 10, minSaving: 0.03 };

export function samplesShrink(frame: Uint8Array, options: Sampling = FRAME_SAMPLING): boolean {
  const { samples, sampleSize, minSaving } = options;
  if (frame.byteLength <= samples * sampleSize) return true; // small enough to just try
  cctx ??= new zstd.CCtx();
  scratch ??= new Uint8Array(zstd.compressBound(sampleSize));
  if (scratch.byteLength < zstd.compressBound(sampleSize)) scratch = new Uint8Array(zstd.compressBound(sampleSize));
  let stored = 0;
  for (let i = 0; i < samples; i++) {
    const at = Math.floor(((frame.byteLength - sampleSize) * i) / Math.max(1, samples - 1));
    stored += cctx.compress(scratch, frame.subarray(at, at + sampleSize), 1);
  }
  return stored <= samples * sampleSize * (1 - minSaving);
}

let cctx: zstd.CCtx | null = null;
let scratch: Uint8Array | null = null;

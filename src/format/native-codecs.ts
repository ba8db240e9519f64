import type * as Zstd from 'zstd-napi/binding.js';
import { lazyModule } from '../util/lazy-module.js';

/**
 * The native codecs the HTTP thread uses, each loaded at its first call: a server at rest or with
 * compression off has no use for their resident memory. Worker files import the packages directly.
 */
export const zstd = lazyModule<typeof Zstd>('zstd-napi/binding.js');

const blakeHash = lazyModule<typeof import('@napi-rs/blake-hash')>('@napi-rs/blake-hash');

/** BLAKE3 of `data` (32 bytes): frame, frame index and journal record digests. */
export function blake3(data: Buffer): Buffer {
  return blakeHash().blake3(data);
}

import type * as Zstd from 'zstd-napi/binding.js';
import { lazyModule } from '../util/lazy-module.js';

/**
 * The native codecs the HTTP thread uses, each loaded at its first call: a server at rest, or one
 * with compression off that has stored nothing yet, has no use for them (~2.5 MiB resident between
 * the two addons and the node binary's pages their symbols resolve against). Worker files import
 * the packages directly: a worker exists only to use them.
 */
export const zstd = lazyModule<typeof Zstd>('zstd-napi/binding.js');

const blakeHash = lazyModule<typeof import('@napi-rs/blake-hash')>('@napi-rs/blake-hash');

/** BLAKE3 of `data` (32 bytes): frame, frame index and journal record digests. */
export function blake3(data: Buffer): Buffer {
  return blakeHash().blake3(data);
}

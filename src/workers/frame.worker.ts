/**
 * Frame work for the Piscina pool: compression of an upload's frames, and checking plus
 * decompression of a download's frames. Upload frames are read in place from shared memory; other
 * buffers arrive moved from the HTTP thread and are moved back, so nothing is copied between threads
 * and nothing is left for the GC.
 */
import { blake3 } from '@napi-rs/blake-hash';
import { Piscina } from 'piscina';
import zstd from 'zstd-napi/binding.js';
import { MIN_FRAME_SAVING } from '../format/frame-sample.js';
import { movable, type CompressResult, type CompressTask, type DecodeResult, type DecodeTask } from '../format/frame-codec.js';

export type { CompressResult, CompressTask, DecodeResult, DecodeTask };

let cctx: zstd.CCtx | null = null;
let dctx: zstd.DCtx | null = null;

/** Several buffers moved back in one answer (Piscina's Transferable protocol). */
function moveBack<T extends object>(value: T, buffers: ArrayBuffer[]): T {
  return Piscina.move({
    get [Piscina.transferableSymbol]() {
      return buffers;
    },
    get [Piscina.valueSymbol]() {
      return value;
    },
  } as never) as unknown as T;
}

export function compressFrame(task: CompressTask): CompressResult {
  const src = task.input.subarray(0, task.length);
  const dst = new Uint8Array(task.out);
  let n = task.length;
  let codec: 0 | 1 = 0;
  if (task.attempt) {
    cctx ??= new zstd.CCtx();
    const c = cctx.compress(dst, src, task.level);
    if (c <= task.length * (1 - MIN_FRAME_SAVING)) {
      codec = 1;
      n = c;
    }
  }
  const stored = codec === 1 ? dst.subarray(0, n) : src;
  const digest = new Uint8Array(blake3(Buffer.from(stored.buffer, stored.byteOffset, stored.byteLength)));
  return moveBack({ input: task.input, out: task.out, codec, storedLength: n, digest }, movable(task.input, task.out));
}

export function decodeFrame(task: DecodeTask): DecodeResult {
  const stored = Buffer.from(task.stored, 0, task.storedLength);
  const buffers = [task.stored, task.out];
  if (!blake3(stored).equals(Buffer.from(task.digest))) {
    return moveBack({ stored: task.stored, out: task.out, in: 'stored', damage: 'stored bytes do not match their BLAKE3 digest' }, buffers);
  }
  if (task.codec === 0) {
    const damage = task.storedLength === task.length ? null : 'raw frame has the wrong length';
    return moveBack({ stored: task.stored, out: task.out, in: 'stored', damage }, buffers);
  }
  dctx ??= new zstd.DCtx();
  let damage: string | null = null;
  try {
    const n = dctx.decompress(new Uint8Array(task.out), stored);
    if (n !== task.length) damage = `frame decompressed to ${n} bytes, not ${task.length}`;
  } catch (e) {
    damage = `frame does not decompress: ${(e as Error).message}`;
  }
  return moveBack({ stored: task.stored, out: task.out, in: 'out', damage }, buffers);
}

/**
 * The frame codec port: frames compressed, checked and decompressed off the HTTP thread. `workers/`
 * implements it; task and result shapes are plain data so they cross threads.
 */
export interface CompressTask {
  /** The frame: moved when over an ArrayBuffer, read in place when over shared memory. */
  readonly input: Uint8Array;
  readonly length: number;
  readonly out: ArrayBuffer;
  readonly level: number;
  /** False: the object has proved incompressible so far; store the frame raw without trying. */
  readonly attempt: boolean;
}

/** The buffers behind a compress task that are moved between threads (shared memory never is). */
export function movable(input: Uint8Array, out: ArrayBuffer): ArrayBuffer[] {
  return input.buffer instanceof ArrayBuffer ? [input.buffer, out] : [out];
}

export interface CompressResult {
  readonly input: Uint8Array;
  readonly out: ArrayBuffer;
  /** 1 when `out` holds the zstd frame, 0 when the frame is to be stored raw from `input`. */
  readonly codec: 0 | 1;
  readonly storedLength: number;
  readonly digest: Uint8Array;
}

export interface DecodeTask {
  readonly stored: ArrayBuffer;
  readonly storedLength: number;
  readonly codec: 0 | 1;
  readonly digest: Uint8Array;
  readonly out: ArrayBuffer;
  readonly length: number;
}

export interface DecodeResult {
  readonly stored: ArrayBuffer;
  readonly out: ArrayBuffer;
  /** Where the frame's logical bytes are: 'stored' for a raw frame, 'out' for a decompressed one. */
  readonly in: 'stored' | 'out';
  /** Null when the frame is intact; otherwise what is wrong with it. */
  readonly damage: string | null;
}

export interface FrameCodec {
  compress(task: CompressTask): Promise<CompressResult>;
  decode(task: DecodeTask): Promise<DecodeResult>;
}

/**
 * The hash port: a running sha256 of shared-memory views, off the event loop (native-hasher.ts, or
 * hash-thread.ts as the fallback); test/conformance/hasher.suite.ts is what both must do.
 */
export interface Hasher {
  open(): StreamHasher;
  /** False while a hash thread is not up yet. */
  readonly ready: boolean;
  /** Starts what hashes unless it runs (an upload is on its way); resolves once it is up. */
  warm(): Promise<void>;
}

/** Streams that can be saved and taken up again, in one format (src/native/sha256.cc) for both hashers. */
export interface ResumableHasher extends Hasher {
  /** A stream that can be saved, going on from `saved` when given; throws RangeError on bytes that are not a saved state. */
  openResumable(saved?: Uint8Array): ResumableStreamHasher;
}

export interface ResumableStreamHasher extends StreamHasher {
  /** The saved state after every buffer given to update before this call, and none given after. */
  snapshot(): Promise<Uint8Array>;
}

export interface StreamHasher {
  /** Hashes `data` next; `done` runs once the hasher no longer reads it (the buffer may be reused). */
  update(data: Uint8Array, done: () => void): void;
  /** Call once. */
  digest(): Promise<string>;
  /** The stream ends without a digest; buffers still being hashed are released as usual. */
  drop(): void;
}

/**
 * The frame codec port: compression of an upload's frames and checking plus decompression of a
 * download's, done off the HTTP thread. The store's compress layer depends on this interface only;
 * `workers/` implements it (the Piscina pools) and the composition root hands it in. Task and result
 * shapes are plain data so they cross threads.
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

/** Compresses and decodes single frames (see format/frame-format.ts) off the calling thread. */
export interface FrameCodec {
  compress(task: CompressTask): Promise<CompressResult>;
  decode(task: DecodeTask): Promise<DecodeResult>;
}

/**
 * The hash port: a running sha256 fed with views of shared memory, in order, off the event loop.
 * `workers/native-hasher.ts` implements it with the sha256 addon (a native thread, no isolate),
 * `workers/hash-thread.ts` on a worker thread (the fallback); test/conformance/hasher.suite.ts is what both must do.
 */
export interface Hasher {
  open(): StreamHasher;
  /** True when a stream opened now is hashed at once; false while a hash thread is not up (it takes ~30 ms to start). */
  readonly ready: boolean;
  /** Starts what hashes unless it runs (an upload is on its way); resolves once it is up. */
  warm(): Promise<void>;
}

/**
 * A Hasher whose streams can be saved and taken up again (resumable uploads): both implementations
 * are, in one portable format (src/native/sha256.cc), so either goes on from the other's state.
 */
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
  /** The hex digest of everything given to update. Call once. */
  digest(): Promise<string>;
  /** The stream ends without a digest; buffers still being hashed are released as usual. */
  drop(): void;
}

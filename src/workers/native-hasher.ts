import { loadNativeAddon, type Loaded } from '../util/native-addon.js';
import { HashThread } from './hash-thread.js';
import type { ResumableHasher, ResumableStreamHasher, StreamHasher } from '../format/frame-codec.js';

/** What src/native/sha256.cc exports. */
interface Sha256Addon {
  /** A new running sha256, or one going on from a saved state (RangeError for bytes that are not one). */
  open(saved?: Uint8Array): object;
  /** `done` runs on the event loop once `data` is no longer read; buffers are hashed in order. */
  update(stream: object, data: Uint8Array, done: () => void): void;
  /** `done(state)` gets the saved state after every update given before this call (and none after). */
  snapshot(stream: object, done: (state: Buffer) => void): void;
  /** The hex digest; only once every update has called back. */
  digest(stream: object): string;
}

let loaded: Loaded<Sha256Addon> | undefined;

/** The sha256 addon, or null when it was not built or does not load: the server then hashes on a worker thread (HashThread). */
export function loadSha256Addon(): Sha256Addon | null {
  return (loaded ??= loadNativeAddon<Sha256Addon>('sha256.node')).addon;
}

/** sha256 on the addon's native thread (src/native/sha256.cc): always ready, nothing to start. */
export class NativeHasher implements ResumableHasher {
  readonly #addon: Sha256Addon;
  readonly ready = true;

  constructor(sha256: Sha256Addon) {
    this.#addon = sha256;
  }

  open(): StreamHasher {
    return new NativeStream(this.#addon);
  }

  openResumable(saved?: Uint8Array): ResumableStreamHasher {
    return new NativeStream(this.#addon, saved);
  }

  warm(): Promise<void> {
    return Promise.resolve();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

class NativeStream implements ResumableStreamHasher {
  readonly #addon: Sha256Addon;
  readonly #stream: object;
  /** Updates given whose `done` has not run yet. */
  #outstanding = 0;
  #digest: { resolve: (hex: string) => void; reject: (e: unknown) => void } | null = null;
  #dropped = false;

  constructor(sha256: Sha256Addon, saved?: Uint8Array) {
    this.#addon = sha256;
    this.#stream = sha256.open(saved);
  }

  update(data: Uint8Array, done: () => void): void {
    if (this.#dropped) {
      queueMicrotask(done);
      return;
    }
    this.#outstanding++;
    this.#addon.update(this.#stream, data, () => {
      this.#outstanding--;
      try {
        done(); // the addon no longer reads it: the buffer may be reused
      } catch (e) {
        // Thrown where a hash thread's message handler would have thrown it: out of this call back,
        // which node-api would otherwise only report as a warning.
        queueMicrotask(() => {
          throw e;
        });
      }
      if (this.#outstanding === 0 && this.#digest !== null) this.#finish();
    });
  }

  snapshot(): Promise<Uint8Array> {
    if (this.#dropped) return Promise.reject(new Error('the stream was dropped'));
    return new Promise((resolve) => {
      this.#outstanding++;
      this.#addon.snapshot(this.#stream, (state) => {
        this.#outstanding--;
        resolve(state);
        if (this.#outstanding === 0 && this.#digest !== null) this.#finish();
      });
    });
  }

  digest(): Promise<string> {
    return new Promise((resolve, reject) => {
      this.#digest = { resolve, reject };
      if (this.#outstanding === 0) this.#finish();
    });
  }

  /** The stream ends without a digest; buffers already given are released as the addon is through with them. */
  drop(): void {
    this.#dropped = true;
  }

  #finish(): void {
    const { resolve, reject } = this.#digest!;
    try {
      resolve(this.#addon.digest(this.#stream));
    } catch (e) {
      reject(e);
    }
  }
}

/** A hasher the process closes at shutdown. */
export type ClosableHasher = ResumableHasher & { close(): Promise<void> };

/** The addon when it is built, otherwise a worker thread; `missing` says why the addon did not load. */
export function openHasher(): { hasher: ClosableHasher; missing: string | null } {
  const sha256 = loadSha256Addon();
  return sha256 !== null ? { hasher: new NativeHasher(sha256), missing: null } : { hasher: new HashThread(), missing: loaded!.missing };
}

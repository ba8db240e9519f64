import { lfsError } from '../errors/errors.js';
import type { ObjectWriter } from '../store/types.js';
import type { RequestContext } from './context.js';

/** Bytes copied and held while the writer is not ready yet (authorization, opening the file). */
const PRE_BUFFER = 1 << 20;

/** The most bytes a body of unknown size may carry, and the error to answer past it. */
export interface BodyCap {
  readonly bytes: number;
  readonly error: () => Error;
}

/**
 * Feeds an upload body from uWS to an ObjectWriter with backpressure: when the writer has enough in
 * flight the socket is paused, and it resumes on the writer's drain. uWS delivers data only to an
 * onData registered synchronously in the route handler, so the pump is created first and the body is
 * held (one MiB, then the socket pauses) until authorization is done and the writer exists.
 */
export class BodyPump {
  readonly #ctx: RequestContext;
  #writer: ObjectWriter | null = null;
  #held: Uint8Array[] = [];
  #heldBytes = 0;
  #paused = false;
  #ended = false;
  #received = 0;
  #cap: BodyCap | null = null;
  #settle: { resolve: () => void; reject: (e: unknown) => void } | null = null;
  #failure: unknown = null;
  readonly #counted: (bytes: number) => void;

  /**
   * `counted` is told of every byte as it reaches the writer (metrics count uploads as they
   * stream); bytes of a body refused before its writer exists are discarded and never counted.
   */
  constructor(ctx: RequestContext, counted: (bytes: number) => void = () => undefined) {
    this.#ctx = ctx;
    this.#counted = counted;
    ctx.bodyPending = true;
    ctx.res.onData((chunk, isLast) => this.#onData(new Uint8Array(chunk), isLast));
    ctx.onAbort(() => this.#fail(lfsError('LFS_ERR_UPLOAD_ABORTED')));
  }

  /** Cuts the body at `cap.bytes` (uploads of unknown size under an access-settings limit). */
  limit(cap: BodyCap | null): void {
    this.#cap = cap;
  }

  #onData(chunk: Uint8Array, isLast: boolean): void {
    this.#ctx.bytesIn += chunk.byteLength;
    if (this.#failure !== null) return;
    this.#received += chunk.byteLength;
    if (this.#cap !== null && this.#received > this.#cap.bytes) {
      this.#fail(this.#cap.error());
      return;
    }
    if (chunk.byteLength > 0) {
      if (this.#writer === null) {
        this.#held.push(chunk.slice()); // uWS reuses the memory after this callback returns
        this.#heldBytes += chunk.byteLength;
        if (this.#heldBytes >= PRE_BUFFER && !isLast) this.#pause();
      } else {
        try {
          const more = this.#writer.write(chunk);
          this.#counted(chunk.byteLength);
          if (!more && !isLast) this.#pause();
        } catch (e) {
          this.#fail(e);
          return;
        }
      }
    }
    if (isLast) {
      this.#ended = true;
      this.#ctx.bodyPending = false;
      // Never leave a finished body's socket paused: the next request on a keep-alive connection
      // would never be read. (The response is not written yet, so `res` is still usable.)
      this.#resume();
      if (this.#writer !== null) this.#settle?.resolve();
    }
  }

  #pause(): void {
    if (!this.#paused) {
      this.#paused = true;
      this.#ctx.res.pause();
    }
  }

  #resume(): void {
    if (this.#paused && !this.#ctx.aborted && !this.#ctx.responded) {
      this.#paused = false;
      this.#ctx.res.resume();
    }
  }

  #fail(e: unknown): void {
    if (this.#failure !== null) return;
    this.#failure = e;
    this.#settle?.reject(e);
  }

  /** Streams the whole body into `writer`; resolves once every byte was given to it. */
  into(writer: ObjectWriter): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.#failure !== null) {
        reject(this.#failure);
        return;
      }
      this.#settle = { resolve, reject };
      this.#writer = writer;
      writer.onDrain(() => this.#resume());
      let more = true;
      try {
        for (const chunk of this.#held) {
          more = writer.write(chunk) && more;
          this.#counted(chunk.byteLength);
        }
      } catch (e) {
        this.#fail(e);
        return;
      }
      this.#held = [];
      this.#heldBytes = 0;
      if (this.#ended) resolve();
      else if (more) this.#resume();
    });
  }
}

/**
 * Collects a small body (JSON API calls) up to `cap` bytes; more is refused with 413 without
 * buffering it (design: cap every buffered body). Must be called synchronously in the handler.
 */
export function collectBody(ctx: RequestContext, cap: number): Promise<Buffer> {
  const res = ctx.res;
  ctx.bodyPending = true;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    res.onData((chunk, isLast) => {
      ctx.bytesIn += chunk.byteLength;
      if (failed) return;
      size += chunk.byteLength;
      if (size > cap) {
        failed = true;
        reject(lfsError('LFS_ERR_BODY_TOO_LARGE', `Request body is larger than ${cap} bytes`));
        return;
      }
      if (chunk.byteLength > 0) chunks.push(Buffer.from(new Uint8Array(chunk)));
      if (isLast) {
        ctx.bodyPending = false;
        resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
      }
    });
    ctx.onAbort(() => reject(lfsError('LFS_ERR_UPLOAD_ABORTED')));
  });
}

/** Parses a collected JSON body; malformed JSON is a 400 with the LFS error body. */
export function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    throw lfsError('LFS_ERR_BAD_JSON');
  }
}

import { lfsError } from '../errors/errors.js';
import type { ObjectWriter } from '../store/types.js';
import type { RequestContext } from './context.js';

/** Bytes copied and held while the writer is not ready yet (authorization, opening the file). */
const PRE_BUFFER = 1 << 20;

/**
 * uWS rearms its 10 s idle timeout on request data only once 160 KiB arrived within it (16 KiB/s,
 * HTTP_RECEIVE_THROUGHPUT_BYTES in its HttpContext), so an upload slower than that is cut after 8-12 s
 * with no answer though it is still progressing. `resume()` sets the timeout anew, so pause + resume
 * while bytes keep coming rearms it: a slow link can push, and a connection that sends nothing for
 * about 10 s is still cut. At most once a second: each is a couple of epoll_ctl calls.
 */
const REARM_EVERY_MS = 1000;

/**
 * Bytes that reach the writer are told to the metrics counter in sums of at least this much (and
 * whenever the body pauses or ends), not chunk by chunk: curl sends 64 KiB pieces and git-lfs 32 KiB,
 * and a prom-client inc() per piece hashes its labels every time.
 */
const COUNT_EVERY = 1 << 20;

/** Rearms uWS's idle timer of one request while its body keeps arriving. */
class IdleRearm {
  readonly #ctx: RequestContext;
  #at = performance.now();

  constructor(ctx: RequestContext) {
    this.#ctx = ctx;
  }

  /**
   * Bytes arrived and the socket is not paused by us. Never once answered: a refusal pauses the
   * socket on purpose (respond.ts), and a resume would read on.
   */
  progress(): boolean {
    const now = performance.now();
    if (now - this.#at < REARM_EVERY_MS || this.#ctx.responded || this.#ctx.aborted) return false;
    this.#at = now;
    this.#ctx.res.pause();
    this.#ctx.res.resume();
    return true;
  }
}

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
  /** Bytes given to the writer and not told to `counted` yet (see COUNT_EVERY). */
  #uncounted = 0;
  readonly #idle: IdleRearm;
  /** This pump resumed the socket, which arms uWS's 10 s idle timer (see #onData's end). */
  #timerArmed = false;

  /**
   * `counted` is told of every byte as it reaches the writer (metrics count uploads as they
   * stream); bytes of a body refused before its writer exists are discarded and never counted.
   */
  constructor(ctx: RequestContext, counted: (bytes: number) => void = () => undefined) {
    this.#ctx = ctx;
    this.#counted = counted;
    ctx.bodyPending = true;
    this.#idle = new IdleRearm(ctx);
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
          this.#count(chunk.byteLength);
          if (!more && !isLast) this.#pause();
        } catch (e) {
          this.#fail(e);
          return;
        }
      }
    }
    if (!isLast && !this.#paused && this.#idle.progress()) this.#timerArmed = true;
    if (isLast) {
      this.#flushCount();
      this.#ended = true;
      this.#ctx.bodyPending = false;
      if (this.#timerArmed && !this.#ctx.responded && !this.#ctx.aborted) {
        // A resume armed uWS's idle timer, which cuts the connection ~10 s later with no answer if
        // the object takes that long to finish (a large object's multipart completion on a busy
        // bucket: seen as nginx's 502 for an object then stored). Paused, the timer is off; the
        // answer resumes the socket so the next request on the connection is read (respond.ts).
        if (!this.#paused) this.#ctx.res.pause();
        this.#paused = true;
        this.#ctx.parked = true;
      } else {
        // Never leave a finished body's socket paused: the next request on a keep-alive connection
        // would never be read. (The response is not written yet, so `res` is still usable.)
        this.#resume();
      }
      if (this.#writer !== null) this.#settle?.resolve();
    }
  }

  #pause(): void {
    if (!this.#paused) {
      this.#flushCount(); // a stalled upload's bytes show in the metrics while it waits
      this.#paused = true;
      this.#ctx.res.pause();
    }
  }

  #count(bytes: number): void {
    this.#uncounted += bytes;
    if (this.#uncounted >= COUNT_EVERY) this.#flushCount();
  }

  #flushCount(): void {
    if (this.#uncounted === 0) return;
    const n = this.#uncounted;
    this.#uncounted = 0;
    this.#counted(n);
  }

  #resume(): void {
    if (this.#paused && !this.#ctx.parked && !this.#ctx.aborted && !this.#ctx.responded) {
      this.#paused = false;
      this.#timerArmed = true;
      this.#ctx.res.resume();
    }
  }

  #fail(e: unknown): void {
    if (this.#failure !== null) return;
    this.#failure = e;
    this.#flushCount();
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
          this.#count(chunk.byteLength);
        }
      } catch (e) {
        this.#fail(e);
        return;
      }
      this.#held = [];
      this.#heldBytes = 0;
      if (this.#ended) this.#flushCount();
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
  const body = new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    const idle = new IdleRearm(ctx);
    res.onData((chunk, isLast) => {
      ctx.bytesIn += chunk.byteLength;
      if (failed) return;
      if (!isLast) idle.progress();
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
  // A handler may refuse the request (bad Accept, bad path) before it awaits the body, and the rest
  // of the body can still arrive and overflow the cap after that answer: nobody awaits this promise
  // then, and its rejection must not surface as an unhandled one. A handler that awaits it still
  // gets the rejection.
  body.catch(() => undefined);
  return body;
}

/** Parses a collected JSON body; malformed JSON is a 400 with the LFS error body. */
export function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    throw lfsError('LFS_ERR_BAD_JSON');
  }
}

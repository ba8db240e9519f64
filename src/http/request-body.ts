import { lfsError } from '../errors/errors.js';
import type { ObjectWriter } from '../store/types.js';
import type { RequestContext } from './context.js';

/** Bytes copied and held while the writer is not ready yet (opening the file), once authorized. */
const PRE_BUFFER = 1 << 20;

/**
 * What any caller may make the server hold of a body while it is being authorized: past it the
 * socket is paused until authorization is done (and a refusal never reads on).
 */
export const PRE_AUTH_BYTES = 16 * 1024;

/**
 * uWS rearms its idle timeout on body data only past 16 KiB/s (HTTP_RECEIVE_THROUGHPUT_BYTES), so a
 * slower upload is cut mid-way. `resume()` sets the timeout anew: pause + resume while bytes come
 * rearms it, and a silent connection is still cut. At most once a second (epoll_ctl calls).
 */
const REARM_EVERY_MS = 1000;

/** Bytes are told to the metrics counter in sums of this much: each prom-client inc() hashes labels. */
const COUNT_EVERY = 1 << 20;

/**
 * After a refusal answered mid-body, at most this many more body bytes are discarded before the
 * close: more than a client's socket buffers hold (Linux autotunes up to 4 MiB), so a client that
 * stops sending once it read the answer is not cut before it could.
 */
export const LINGER_BYTES = 8 << 20;
/** ... and for at most this long after the answer, whichever comes first. */
export const LINGER_MS = 5000;

/**
 * A lingering close (nginx's) after a refusal answered while the client was still sending. Closing
 * with body bytes unread makes the kernel send a reset, which discards the answer before the client
 * reads it (ECONNRESET rather than its 401/413/507). So the answer is written without ending the
 * response (respond.ts), the rest of the body is discarded, and the connection is closed once the
 * body ended (a FIN), the client closed, or LINGER_BYTES / LINGER_MS were reached.
 */
export class Linger {
  readonly #ctx: RequestContext;
  readonly #timer: NodeJS.Timeout;
  /** bytesDiscarded when the answer went out: LINGER_BYTES counts from there. */
  readonly #from: number;
  #closing = false;
  #over = false;
  #resolve!: () => void;
  /** Resolves once the connection is closed (by the server or the client). */
  readonly done = new Promise<void>((resolve) => (this.#resolve = resolve));

  constructor(ctx: RequestContext) {
    this.#ctx = ctx;
    this.#from = ctx.bytesDiscarded;
    this.#timer = setTimeout(() => this.close(), LINGER_MS);
    ctx.onAbort(() => this.#finish());
    // Paused by the body's reader or the refusal, or not: read on either way. Pause first: uWS's
    // resume restores the poll events the last pause saved, whichever socket that was.
    ctx.res.pause();
    ctx.res.resume();
  }

  /** Body bytes that came after the answer: thrown away; at the body's end or past the bound the connection is closed. */
  data(bytes: number, isLast: boolean): void {
    this.#ctx.bytesDiscarded += bytes;
    if (isLast) this.#ctx.bodyPending = false;
    if (isLast || this.#ctx.bytesDiscarded - this.#from > LINGER_BYTES) this.close();
  }

  /** Closes once uWS has sent its cork buffer: closing inside its callback would drop the answer. */
  close(): void {
    if (this.#closing) return;
    this.#closing = true;
    setImmediate(() => {
      // uWS runs onAborted from inside close(): #finish runs there.
      if (!this.#ctx.aborted) this.#ctx.res.close();
      this.#finish();
    });
  }

  #finish(): void {
    if (this.#over) return;
    this.#over = true;
    clearTimeout(this.#timer);
    this.#resolve();
  }
}

/**
 * Body bytes no reader takes (refused, or a route that reads none): after a lingering answer they go
 * to its Linger; before any answer they are dropped. A kept connection is closed by the answer
 * (respond.ts): its socket may be paused and the next request would never be read.
 */
function discard(ctx: RequestContext, bytes: number, isLast: boolean): void {
  if (ctx.linger !== null) {
    ctx.linger.data(bytes, isLast);
    return;
  }
  ctx.bytesDiscarded += bytes;
  if (isLast && ctx.clientCloses) ctx.bodyPending = false;
}

/** Rearms uWS's idle timer of one request while its body keeps arriving. */
class IdleRearm {
  readonly #ctx: RequestContext;
  #at = performance.now();

  constructor(ctx: RequestContext) {
    this.#ctx = ctx;
  }

  /** Never once answered: a refusal pauses the socket on purpose, and a resume would read on. */
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
 * Feeds an upload body to an ObjectWriter with backpressure (pause; resume on drain). uWS delivers
 * data only to an onData registered synchronously in the handler, so the pump exists first and holds
 * the body until the writer does: PRE_AUTH_BYTES until authorized(), then PRE_BUFFER.
 */
export class BodyPump {
  readonly #ctx: RequestContext;
  #writer: ObjectWriter | null = null;
  #held: Uint8Array[] = [];
  #heldBytes = 0;
  #hold = PRE_AUTH_BYTES;
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
  /** This pump resumed the socket, which arms uWS's idle timer (see #onData's end). */
  #timerArmed = false;

  /** Bytes of a body refused before its writer exists are never counted. */
  constructor(ctx: RequestContext, counted: (bytes: number) => void = () => undefined) {
    this.#ctx = ctx;
    this.#counted = counted;
    ctx.bodyPending = true;
    this.#idle = new IdleRearm(ctx);
    ctx.res.onData((chunk, isLast) => this.#onData(new Uint8Array(chunk), isLast));
    ctx.onAbort(() => this.#fail(lfsError('LFS_ERR_UPLOAD_ABORTED')));
  }

  /** The uploader is authorized: up to PRE_BUFFER is held until the writer exists. */
  authorized(): void {
    this.#hold = PRE_BUFFER;
    if (this.#writer === null && this.#failure === null && this.#heldBytes < PRE_BUFFER) this.#resume();
  }

  /** Cuts the body at `cap.bytes` (uploads of unknown size under an access-settings limit). */
  limit(cap: BodyCap | null): void {
    this.#cap = cap;
  }

  #onData(chunk: Uint8Array, isLast: boolean): void {
    if (this.#failure !== null || this.#ctx.linger !== null) {
      discard(this.#ctx, chunk.byteLength, isLast);
      return;
    }
    this.#ctx.bytesIn += chunk.byteLength;
    this.#received += chunk.byteLength;
    if (this.#cap !== null && this.#received > this.#cap.bytes) {
      this.#fail(this.#cap.error());
      return;
    }
    if (chunk.byteLength > 0) {
      if (this.#writer === null) {
        this.#held.push(chunk.slice()); // uWS reuses the memory after this callback returns
        this.#heldBytes += chunk.byteLength;
        if (this.#heldBytes >= this.#hold && !isLast) this.#pause();
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
        // A resume armed uWS's idle timer, which would cut a slow finish (a large multipart
        // completion) with no answer. Paused, the timer is off; the answer resumes (respond.ts).
        if (!this.#paused) this.#ctx.res.pause();
        this.#paused = true;
        this.#ctx.parked = true;
      } else {
        // Never leave a finished body's socket paused: the next keep-alive request would not be read.
        this.#resume();
      }
      if (this.#writer !== null) this.#settle?.resolve();
    }
  }

  #pause(): void {
    // Data already read can still arrive after a refusal was answered, when `res` is off limits.
    if (this.#ctx.responded || this.#ctx.aborted) return;
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
 * A small JSON body collected while its request is authorized: at most `hold` bytes until release()
 * (then the socket pauses), `cap` in all (past it: 413). Create it synchronously in the handler.
 */
export class HeldBody {
  readonly #ctx: RequestContext;
  readonly #cap: number;
  readonly #hold: number;
  readonly #chunks: Buffer[] = [];
  #size = 0;
  #released = false;
  #paused = false;
  #ended = false;
  #failure: unknown = null;
  #waiter: { resolve: (b: Buffer) => void; reject: (e: unknown) => void } | null = null;
  readonly #idle: IdleRearm;

  constructor(ctx: RequestContext, cap: number, hold: number) {
    this.#ctx = ctx;
    this.#cap = cap;
    this.#hold = Math.min(hold, cap);
    this.#idle = new IdleRearm(ctx);
    ctx.bodyPending = true;
    ctx.res.onData((chunk, isLast) => this.#onData(chunk, isLast));
    ctx.onAbort(() => this.#fail(lfsError('LFS_ERR_UPLOAD_ABORTED')));
  }

  #onData(chunk: ArrayBuffer, isLast: boolean): void {
    if (this.#failure !== null || this.#ctx.linger !== null) {
      discard(this.#ctx, chunk.byteLength, isLast);
      return;
    }
    this.#ctx.bytesIn += chunk.byteLength;
    this.#size += chunk.byteLength;
    if (this.#size > this.#cap) {
      this.#fail(lfsError('LFS_ERR_BODY_TOO_LARGE', `Request body is larger than ${this.#cap} bytes`));
      return;
    }
    if (chunk.byteLength > 0) this.#chunks.push(Buffer.from(new Uint8Array(chunk))); // uWS reuses the memory
    if (isLast) {
      this.#ended = true;
      this.#ctx.bodyPending = false;
      this.#settle();
    } else if (!this.#released && this.#size >= this.#hold) {
      this.#pause();
    } else if (!this.#paused) {
      this.#idle.progress();
    }
  }

  #pause(): void {
    if (this.#paused || this.#ctx.aborted || this.#ctx.responded) return;
    this.#paused = true;
    this.#ctx.res.pause();
  }

  #fail(e: unknown): void {
    if (this.#failure !== null) return;
    this.#failure = e;
    // Nothing more is read until the answer (413): see respond.ts for what happens to the rest.
    this.#pause();
    this.#chunks.length = 0;
    this.#settle();
  }

  #settle(): void {
    const waiter = this.#waiter;
    if (waiter === null) return;
    if (this.#failure !== null) {
      this.#waiter = null;
      waiter.reject(this.#failure);
    } else if (this.#ended) {
      this.#waiter = null;
      waiter.resolve(this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks));
    }
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    if (this.#paused && this.#failure === null && !this.#ctx.aborted && !this.#ctx.responded) {
      this.#paused = false;
      this.#ctx.res.resume();
    }
  }

  /** The whole body, once released; rejects with 413 past the cap or 400 when the client went away. */
  read(): Promise<Buffer> {
    if (!this.#released) return Promise.reject(new Error('request body read before the caller was authorized'));
    return new Promise<Buffer>((resolve, reject) => {
      this.#waiter = { resolve, reject };
      this.#settle();
    });
  }
}

/**
 * True when `json` nests arrays and objects deeper than `max` levels: a byte scan (strings and
 * their escapes skipped) before JSON.parse, whose recursion a deep body would otherwise drive.
 */
export function jsonTooDeep(json: Uint8Array, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json[i]!;
    if (inString) {
      if (c === 0x5c) i++; // backslash: the next byte is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}

/** A route that takes no body answers a request announcing one and closes (respond.ts). */
export function carriesBody(ctx: RequestContext): boolean {
  const length = ctx.header('content-length');
  return ctx.header('transfer-encoding') !== '' || (length !== '' && length !== '0');
}

/** Stops reading a body nobody takes; the answer then closes the connection (respond.ts). */
export function refuseBody(ctx: RequestContext): void {
  if (!carriesBody(ctx)) return;
  ctx.bodyPending = true;
  ctx.res.pause();
  // A lingering answer must learn where the body ends, and uWS hands data only to an onData
  // registered now. Not on a connection the client keeps: uWS turns its idle timer off at the end
  // of a body it hands over, and that connection, paused after its answer, must still time out.
  if (ctx.clientCloses) ctx.res.onData((chunk, isLast) => discard(ctx, chunk.byteLength, isLast));
}

export function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    throw lfsError('LFS_ERR_BAD_JSON');
  }
}

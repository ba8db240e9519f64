import { ERROR_CODES } from '../errors/codes.js';
import { isLfsError } from '../errors/errors.js';
import { storageFault } from '../errors/storage-fault.js';
import { LFS_JSON } from '../protocol/media-types.js';
import type { ChunkSource } from '../store/types.js';
import type { RequestContext } from './context.js';
import { Linger } from './request-body.js';
import { lazyModule } from '../util/lazy-module.js';

// Node's reason phrases; node:http (and node:net beneath it, ~1 MiB) loads with the first answer.
const nodeHttp = lazyModule<typeof import('node:http')>('node:http');
const statusLine = (status: number): string => `${status} ${nodeHttp().STATUS_CODES[status] ?? 'Unknown'}`;

/**
 * uWS's cork buffer. uWS corks the socket while it parses what one read brought, and sends what was
 * written only after that; a write that does not fit in the buffer goes out at once.
 */
const CORK_BUFFER_BYTES = 16 * 1024;

/** Errors after which the connection cannot be read on: answered, then closed (see sendAndClose). */
const CLOSING_CODES: ReadonlySet<string> = new Set(['LFS_ERR_BAD_FRAMING', 'LFS_ERR_LENGTH_TOO_LARGE']);

/**
 * Writes one response's head in a corked write, then lets `finish` end it. No-op when the client is
 * gone or an answer was already given.
 */
function answer(
  ctx: RequestContext,
  status: number,
  headers: Readonly<Record<string, string>>,
  contentType: string | null,
  finish: (res: RequestContext['res']) => void,
): void {
  if (ctx.aborted || ctx.responded) return;
  ctx.responded = true;
  ctx.status = status;
  if (ctx.parked) {
    // The body ended paused (BodyPump): read on, so the next request on the connection is seen.
    ctx.parked = false;
    ctx.res.resume();
  }
  ctx.res.cork(() => {
    ctx.res.writeStatus(statusLine(status));
    ctx.res.writeHeader('X-Request-Id', ctx.requestId);
    if (contentType !== null) ctx.res.writeHeader('Content-Type', contentType);
    for (const [k, v] of Object.entries(headers)) ctx.res.writeHeader(k, v);
    finish(ctx.res);
  });
}

/** Writes a complete response in one corked write. No-op when the client is gone. */
export function send(
  ctx: RequestContext,
  status: number,
  body: string | Buffer,
  headers: Record<string, string> = {},
  contentType: string | null = LFS_JSON,
): void {
  answer(ctx, status, headers, contentType, (res) => {
    const lingering = ctx.bodyPending && ctx.clientCloses;
    if (ctx.method === 'head') {
      // RFC 9110 §9.3.2: the head GET would send (Content-Length included), never the body.
      if (lingering) endLingering(ctx, Buffer.byteLength(body));
      else endHead(ctx, Buffer.byteLength(body));
      return;
    }
    if (lingering) {
      endLingering(ctx, WITHOUT_BODY.has(status) ? null : body);
      return;
    }
    ctx.bytesOut += typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
    if (!ctx.bodyPending) {
      res.end(body);
      return;
    }
    // Answered before the body was read (a refusal), on a connection the client means to keep: the
    // rest of the body must not be parsed as the next request, but cutting the connection at once
    // would reset it while the client is still sending, and a reset throws away the answer waiting
    // in the client's receive buffer. git-lfs then sees only "connection reset" and retries with
    // backoff, never learning that the 401 asked for credentials (measured: 1 GiB pushes of 1.1 s
    // took 9–28 s now and then). So the socket stops being read, the answer says the connection
    // will close, and the client closes it (Go, curl and undici do once they have the answer) or
    // uWS's idle timeout does (~10 s).
    res.pause();
    res.writeHeader('Connection', 'close');
    res.end(body, false);
  });
}

/** Statuses whose answers never carry a body (RFC 9110 §15.3.5, §15.4.5). */
const WITHOUT_BODY: ReadonlySet<number> = new Set([204, 304]);

/**
 * Ends, inside `answer`'s cork, an answer given before the body was read to a client that said
 * `Connection: close`. uWS closes such a connection the moment a response ends, and with body bytes
 * still unread that close is a reset which throws the answer away before the client reads it. So
 * the response is never ended in uWS's terms: the end of the head and the body are written as the
 * value of its last header, and a Linger discards the rest of the body, then closes.
 *
 * The CRLF uWS writes after a header value then ends the body (whitespace after the JSON, counted
 * in Content-Length). A number is a HEAD answer's Content-Length; null is an answer without a body
 * (204, 304), whose head ends with the Connection header.
 */
function endLingering(ctx: RequestContext, body: string | Buffer | number | null): void {
  if (body === null) {
    ctx.res.writeHeader('Connection', 'close\r\n');
  } else if (typeof body === 'number') {
    ctx.res.writeHeader('Connection', 'close');
    ctx.res.writeHeader('Content-Length', `${body}\r\n`);
  } else {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    ctx.res.writeHeader('Connection', 'close');
    ctx.res.writeHeader('Content-Length', Buffer.concat([Buffer.from(`${bytes.byteLength + 2}\r\n\r\n`), bytes]));
    ctx.bytesOut += bytes.byteLength + 2;
  }
  ctx.linger = new Linger(ctx);
}

/** Answers a HEAD request: the head a GET would send, with `length` as its Content-Length, and no body. */
export function sendHead(ctx: RequestContext, status: number, headers: Readonly<Record<string, string>>, length: number): void {
  answer(ctx, status, headers, null, () => (ctx.bodyPending && ctx.clientCloses ? endLingering(ctx, length) : endHead(ctx, length)));
}

/**
 * Ends a HEAD answer announcing `length` bytes. Not endWithoutBody(length): uWS then counts the
 * response as still owing those bytes, and the next request on the connection is never answered or
 * the connection is closed under it (behind nginx's keep-alive pool: a 502 or a 504 for whatever
 * request comes next). The header written by hand, endWithoutBody() completes the response.
 */
function endHead(ctx: RequestContext, length: number): void {
  if (ctx.bodyPending) {
    // A HEAD that sent a body, answered before it was read: as any such refusal (see send).
    ctx.res.pause();
    ctx.res.writeHeader('Connection', 'close');
  }
  ctx.res.writeHeader('Content-Length', String(length));
  ctx.res.endWithoutBody();
}

/**
 * Answers and closes the connection at once: for a request whose framing cannot be trusted, where
 * the bytes after its head must never be parsed as a next request (RFC 9112 §6.3), and for one uWS
 * closes on its own right after the handler (Content-Length of 1e9 or more). Both happen while uWS
 * has the socket corked; a response that fits the cork buffer would then wait for the uncork, by
 * which time uWS has parsed the smuggled next request (and answered it) or closed the connection
 * (throwing the answer away). So the JSON body is padded with spaces (still valid JSON) past the
 * cork buffer: uWS writes it at once, then ends the connection and parses nothing more.
 */
function sendAndClose(ctx: RequestContext, status: number, json: string, headers: Readonly<Record<string, string>>): void {
  answer(ctx, status, headers, LFS_JSON, (res) => res.end(json.padEnd(CORK_BUFFER_BYTES + 1), true));
}

export function sendJson(ctx: RequestContext, status: number, value: unknown, headers?: Record<string, string>): void {
  send(ctx, status, JSON.stringify(value), headers);
}

/**
 * The single error boundary's writer (docs/architecture.md, "Conventions"): an LfsError becomes its status, its headers
 * and the Git LFS error body; anything else is logged and answered as a generic 500.
 */
export function sendError(ctx: RequestContext, err: unknown, log: (msg: string, fields: object) => void): void {
  // A full disk or an I/O error is a condition we can name, whichever layer hit it (the index's
  // SQLITE_FULL included): its own status and body, never a 500.
  const named = isLfsError(err) ? err : storageFault(err);
  if (named !== null) {
    if (named !== err) log('storage fault', { request_id: ctx.requestId, route: ctx.route, status: named.status, err: String(err) });
    const body = { message: named.message, request_id: ctx.requestId };
    if (CLOSING_CODES.has(named.code)) sendAndClose(ctx, named.status, JSON.stringify(body), named.headers);
    else sendJson(ctx, named.status, body, named.headers);
    return;
  }
  log('unhandled error', { level: 'error', request_id: ctx.requestId, route: ctx.route, err: String((err as Error)?.stack ?? err) });
  sendJson(ctx, 500, { message: ERROR_CODES.LFS_ERR_INTERNAL.message, request_id: ctx.requestId });
}

/**
 * Streams `length` bytes from `source` as the response, honouring uWS backpressure: a chunk tryEnd
 * could not take whole is finished from onWritable before the next is asked for, so a connection
 * holds at most the source's read-ahead (READ_AHEAD + 1 pooled buffers for a file) whatever the
 * object size. On any failure after the head went out the connection is cut, so a client never
 * takes a short or damaged body for a whole one. `counted` is told of each chunk once uWS has
 * taken all of it (metrics count downloads as they stream).
 */
export async function sendStream(
  ctx: RequestContext,
  status: number,
  headers: Record<string, string>,
  source: ChunkSource,
  length: number,
  counted: (bytes: number) => void = () => undefined,
): Promise<void> {
  const res = ctx.res;
  let headWritten = false;
  // The chunk uWS has not fully taken yet, and the write offset where it started.
  let pending: Uint8Array | null = null;
  let pendingOffset = 0;
  let wake: { resolve: () => void; reject: (e: unknown) => void } | null = null;
  let finished = false; // tryEnd reported the whole response sent: `res` must not be touched again
  const offAbort = ctx.onAbort(() => wake?.reject(new Error('client went away')));
  res.onWritable((offset) => {
    if (pending === null) return true;
    const [ok, done] = res.tryEnd(pending.subarray(offset - pendingOffset), length);
    if (done) finished = true;
    if (ok || done) {
      ctx.bytesOut += pending.byteLength;
      counted(pending.byteLength);
      pending = null;
      wake?.resolve();
    }
    return ok;
  });
  try {
    for (;;) {
      const chunk = await source.next();
      if (ctx.aborted) throw new Error('client went away');
      if (chunk === null) throw new Error(`source ended before ${length} bytes were sent`);
      res.cork(() => {
        if (!headWritten) {
          headWritten = true;
          ctx.responded = true;
          ctx.status = status;
          res.writeStatus(statusLine(status));
          res.writeHeader('X-Request-Id', ctx.requestId);
          for (const [k, v] of Object.entries(headers)) res.writeHeader(k, v);
        }
        const offset = res.getWriteOffset();
        const [ok, done] = res.tryEnd(chunk, length);
        if (done) finished = true;
        if (!ok && !done) {
          pending = chunk;
          pendingOffset = offset;
        } else {
          ctx.bytesOut += chunk.byteLength;
          counted(chunk.byteLength);
        }
      });
      if (finished) return;
      if (pending !== null) {
        await new Promise<void>((resolve, reject) => (wake = { resolve, reject }));
        wake = null;
        if (finished) return;
      }
    }
  } catch (e) {
    if (!ctx.aborted && headWritten && !finished) res.close();
    else if (!headWritten) ctx.responded = false;
    throw e;
  } finally {
    offAbort();
    await source.close();
  }
}

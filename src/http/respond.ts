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

/** uWS's cork buffer: a write that does not fit it goes out at once instead of after the parse. */
const CORK_BUFFER_BYTES = 16 * 1024;

/** Errors after which the connection cannot be read on: answered, then closed (see sendAndClose). */
const CLOSING_CODES: ReadonlySet<string> = new Set(['LFS_ERR_BAD_FRAMING', 'LFS_ERR_LENGTH_TOO_LARGE']);

/** Writes one response's head corked, then `finish` ends it. No-op when gone or already answered. */
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
    // A refusal before the body was read, on a kept connection: the rest must not be parsed as a
    // request, but cutting now would reset it and discard the answer in the client's buffer (git-lfs
    // would retry with backoff, never seeing the 401). So stop reading, say the connection will
    // close, and let the client (or uWS's idle timeout) close it.
    res.pause();
    res.writeHeader('Connection', 'close');
    res.end(body, false);
  });
}

/** Statuses whose answers never carry a body (RFC 9110 §15.3.5, §15.4.5). */
const WITHOUT_BODY: ReadonlySet<number> = new Set([204, 304]);

/**
 * Ends an early answer to a `Connection: close` client without ending the response in uWS's terms
 * (its close with body bytes unread would be a reset that discards the answer): the head's end and
 * the body go in its last header's value (the CRLF uWS adds is whitespace counted in Content-Length),
 * and a Linger discards the rest of the body, then closes. `length`: a HEAD's Content-Length; null:
 * no body (204, 304).
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

export function sendHead(ctx: RequestContext, status: number, headers: Readonly<Record<string, string>>, length: number): void {
  answer(ctx, status, headers, null, () => (ctx.bodyPending && ctx.clientCloses ? endLingering(ctx, length) : endHead(ctx, length)));
}

/**
 * Not endWithoutBody(length): uWS would count the response as still owing those bytes and never
 * answer the next request on the connection. The header is written by hand instead.
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
 * Answers and closes at once: for framing that cannot be trusted (RFC 9112 §6.3) and for what uWS
 * closes itself after the handler (Content-Length >= 1e9). A corked answer would wait until uWS had
 * parsed the smuggled next request or closed; so the JSON is padded with spaces past the cork buffer
 * and goes out at once.
 */
function sendAndClose(ctx: RequestContext, status: number, json: string, headers: Readonly<Record<string, string>>): void {
  answer(ctx, status, headers, LFS_JSON, (res) => res.end(json.padEnd(CORK_BUFFER_BYTES + 1), true));
}

export function sendJson(ctx: RequestContext, status: number, value: unknown, headers?: Record<string, string>): void {
  send(ctx, status, JSON.stringify(value), headers);
}

/** The single error boundary's writer (docs/architecture.md, "Conventions"): anything not an LfsError is a logged 500. */
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
 * Streams `length` bytes with uWS backpressure: a chunk tryEnd could not take whole is finished from
 * onWritable before the next is asked for, so memory is the source's read-ahead whatever the size.
 * A failure after the head cuts the connection, so a short body is never taken for a whole one.
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

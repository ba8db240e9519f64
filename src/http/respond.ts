import { STATUS_CODES } from 'node:http';
import type { Readable } from 'node:stream';
import { ERROR_CODES } from '../errors/codes.js';
import { isLfsError } from '../errors/errors.js';
import { LFS_JSON } from '../protocol/media-types.js';
import type { RequestContext } from './context.js';

const statusLine = (status: number): string => `${status} ${STATUS_CODES[status] ?? 'Unknown'}`;

/** Writes a complete response in one corked write. No-op when the client is gone. */
export function send(
  ctx: RequestContext,
  status: number,
  body: string | Buffer,
  headers: Record<string, string> = {},
  contentType: string | null = LFS_JSON,
): void {
  if (ctx.aborted || ctx.responded) return;
  ctx.responded = true;
  ctx.status = status;
  ctx.res.cork(() => {
    ctx.res.writeStatus(statusLine(status));
    ctx.res.writeHeader('X-Request-Id', ctx.requestId);
    if (contentType !== null) ctx.res.writeHeader('Content-Type', contentType);
    for (const [k, v] of Object.entries(headers)) ctx.res.writeHeader(k, v);
    // A body left unread on the wire would be parsed as the next request: close instead.
    ctx.res.end(body, ctx.bodyPending);
  });
}

export function sendJson(ctx: RequestContext, status: number, value: unknown, headers?: Record<string, string>): void {
  send(ctx, status, JSON.stringify(value), headers);
}

/**
 * The single error boundary's writer (design rule 4): an LfsError becomes its status, its headers
 * and the Git LFS error body; anything else is logged and answered as a generic 500.
 */
export function sendError(ctx: RequestContext, err: unknown, log: (msg: string, fields: object) => void): void {
  if (isLfsError(err)) {
    sendJson(ctx, err.status, { message: err.message, request_id: ctx.requestId }, err.headers);
    return;
  }
  log('unhandled error', { request_id: ctx.requestId, route: ctx.route, err: String((err as Error)?.stack ?? err) });
  sendJson(ctx, 500, { message: ERROR_CODES.LFS_ERR_INTERNAL.message, request_id: ctx.requestId });
}

/**
 * Streams `body` (exactly `length` bytes) as the response, honouring uWS backpressure: a chunk that
 * tryEnd could not take is retried from onWritable, and the source is paused meanwhile, so at most
 * one chunk plus the source's read-ahead is held per connection whatever the object size.
 */
export function sendStream(
  ctx: RequestContext,
  status: number,
  headers: Record<string, string>,
  body: Readable,
  length: number,
): Promise<void> {
  const res = ctx.res;
  return new Promise<void>((resolve, reject) => {
    let headWritten = false;
    let pending: Buffer | null = null;
    let pendingOffset = 0;
    let finished = false;

    const finish = (err?: unknown): void => {
      if (finished) return;
      finished = true;
      ctx.signal.removeEventListener('abort', onAbort);
      body.destroy();
      if (err === undefined) resolve();
      else reject(err);
    };
    const onAbort = (): void => finish(new Error('client went away'));
    ctx.signal.addEventListener('abort', onAbort);

    const writeHead = (): void => {
      if (headWritten) return;
      headWritten = true;
      ctx.responded = true;
      ctx.status = status;
      res.writeStatus(statusLine(status));
      res.writeHeader('X-Request-Id', ctx.requestId);
      for (const [k, v] of Object.entries(headers)) res.writeHeader(k, v);
    };

    if (length === 0) {
      res.cork(() => {
        writeHead();
        res.end();
      });
      finish();
      return;
    }

    res.onWritable((offset) => {
      if (pending === null) return true;
      const [ok, done] = res.tryEnd(pending.subarray(offset - pendingOffset), length);
      if (done) {
        finish();
        return true;
      }
      if (ok) {
        pending = null;
        body.resume();
      }
      return ok;
    });

    body.on('data', (chunk: Buffer) => {
      if (finished || ctx.aborted) return;
      res.cork(() => {
        writeHead();
        const offset = res.getWriteOffset();
        const [ok, done] = res.tryEnd(chunk, length);
        if (done) {
          finish();
        } else if (!ok) {
          pending = chunk;
          pendingOffset = offset;
          body.pause();
        }
      });
    });
    body.on('error', (err) => {
      // Headers may be out already: cut the connection so the client sees a short body, never wrong bytes.
      if (!ctx.aborted) {
        if (headWritten) res.close();
        else ctx.responded = false;
      }
      finish(err);
    });
    body.on('end', () => {
      if (!finished && !ctx.aborted) {
        // The source ended short of `length`: never let the client take a short body for a whole one.
        res.close();
        finish(new Error(`source ended before ${length} bytes were sent`));
      }
    });
  });
}

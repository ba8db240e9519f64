import { Readable } from 'node:stream';
import { lfsError } from '../errors/errors.js';
import type { RequestContext } from './context.js';

/**
 * The request body as a Node Readable. uWS neuters each chunk's ArrayBuffer when onData returns, so
 * every chunk is copied once here; when the consumer stops reading (push() returns false) the socket
 * is paused and it resumes on the next _read — backpressure from disk to the client's TCP window.
 * Must be called synchronously in the route handler, before any await.
 */
export function requestBody(ctx: RequestContext, highWaterMark = 1 << 20): Readable {
  const res = ctx.res;
  let paused = false;
  ctx.bodyPending = true;
  const stream = new Readable({
    highWaterMark,
    read() {
      if (paused && !ctx.aborted && !ctx.responded) {
        paused = false;
        res.resume();
      }
    },
  });
  res.onData((chunk, isLast) => {
    if (chunk.byteLength > 0 && !stream.destroyed) {
      if (!stream.push(Buffer.from(new Uint8Array(chunk))) && !paused && !isLast) {
        paused = true;
        res.pause();
      }
    }
    if (isLast) {
      ctx.bodyPending = false;
      stream.push(null);
    }
  });
  ctx.signal.addEventListener('abort', () => stream.destroy(lfsError('LFS_ERR_UPLOAD_ABORTED')), { once: true });
  return stream;
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
    ctx.signal.addEventListener('abort', () => reject(lfsError('LFS_ERR_UPLOAD_ABORTED')), { once: true });
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

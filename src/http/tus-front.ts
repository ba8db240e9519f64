import { createServer, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { PassThrough } from 'node:stream';
import { Agent, request as undiciRequest } from 'undici';
import type { AddressInfo } from 'node:net';

/**
 * The resumable-upload listener (SVC_TUS_PORT; docs/resumable-uploads.md, "Bodies of a gigabyte and
 * more"). git-lfs sends a tus PATCH with a Content-Length of every byte still to send, never chunked,
 * and the uWS build the server runs on refuses a Content-Length of 1e9 or more: the objects that most
 * need resuming could never be sent. This listener, on node:http (which takes any length), passes
 * each request to the main listener on the loopback with its body re-framed as chunked, and the
 * answer back as it comes. It decides nothing: routes, authorization and the route table's checks
 * are the main listener's, as for any request. Memory per request stays bounded: the body is piped
 * with backpressure, and a client gone mid-body aborts the request it was passed on as.
 *
 * An answer that comes before the client's body has all arrived (a refusal: 401, 409, 413, 507…)
 * says `Connection: close`, and the connection is then closed the way the main listener closes it
 * (docs/http.md, "A refusal while the body is still coming"): the rest of the body is read and
 * discarded until it ends, the client closes, or the bounds below are reached. Closing with body
 * bytes unread would reset the connection, and the reset would hit the client's next request.
 */
export interface TusFront {
  readonly port: number;
  close(): Promise<void>;
}

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the framing this hop sets itself. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'content-length', 'expect', 'host']);

/** No byte either way for this long: the connection is closed (a client that vanished without a FIN). */
const IDLE_MS = 60_000;

/** After an answer that came before the body's end: at most this much more is discarded, for at most this long (as the main listener). */
const LINGER_BYTES = 8 << 20;
const LINGER_MS = 5_000;

/**
 * Ends `res` (already answered in full, with Connection: close) once the rest of `req`'s body is read
 * and discarded, or the client closed, or the linger bounds are reached: whichever comes first.
 */
function endAfterBody(req: IncomingMessage, res: ServerResponse): void {
  let discarded = 0;
  const done = (): void => {
    clearTimeout(timer);
    req.off('data', discard);
    if (!res.writableEnded && !res.destroyed) res.end();
  };
  const discard = (chunk: Buffer): void => {
    discarded += chunk.length;
    if (discarded > LINGER_BYTES) done();
  };
  const timer = setTimeout(done, LINGER_MS);
  if (req.complete) return done();
  req.on('data', discard);
  req.once('end', done);
  res.once('close', done);
  req.resume();
}

function forwardable(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) if (!HOP.has(k) && v !== undefined) out[k] = v;
  return out;
}

export async function startTusFront(host: string, port: number, upstream: { host: string; port: number }, log: (msg: string, fields: object) => void): Promise<TusFront> {
  // undici, not node:http, passes requests on: a refusal answered before the body was read (the main
  // listener then closes the connection) still reaches the client, where node:http's client reports
  // only the EPIPE of its body write.
  const agent = new Agent({ keepAliveTimeout: 4000, headersTimeout: 0, bodyTimeout: IDLE_MS });
  const origin = `http://${upstream.host.includes(':') ? `[${upstream.host}]` : upstream.host}:${upstream.port}`;
  const server = createServer((req, res) => {
    const headers = forwardable(req.headers);
    // Appended as a proxy does: with SVC_TRUST_PROXY the main listener takes the last entry, so a
    // client's own X-Forwarded-For never passes for its address.
    const forwarded = req.headers['x-forwarded-for'];
    const peer = req.socket.remoteAddress ?? '';
    headers['x-forwarded-for'] = forwarded === undefined ? peer : `${Array.isArray(forwarded) ? forwarded.join(', ') : forwarded}, ${peer}`;
    const length = req.headers['content-length'];
    const hasBody = req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
    const gone = new AbortController();
    // The client went away mid-request: the main listener must see it go too (it keeps what arrived).
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    // The body goes through a stream of its own: whatever undici does to it once the answer is in
    // (it destroys a body it is still writing), the client's connection stays this listener's to close.
    const body = hasBody ? req.pipe(new PassThrough()) : undefined;
    /** An answer before the body's end: pass no more of it on, and say the connection closes. */
    const early = (back: OutgoingHttpHeaders): boolean => {
      if (req.complete) return false;
      if (body !== undefined) req.unpipe(body);
      back.connection = 'close';
      return true;
    };
    undiciRequest(`${origin}${req.url ?? '/'}`, {
      method: req.method as 'GET',
      headers: headers as Record<string, string>,
      // A stream of unknown length goes chunked; an empty body as such.
      body: body ?? (length === '0' ? '' : undefined),
      dispatcher: agent,
      signal: gone.signal,
    }).then(
      (answer) => {
        const back = forwardable(answer.headers as IncomingHttpHeaders);
        const len = answer.headers['content-length'];
        if (typeof len === 'string') back['content-length'] = len;
        const lingers = early(back);
        res.writeHead(answer.statusCode, back);
        answer.body.pipe(res, { end: !lingers });
        answer.body.on('error', () => res.destroy());
        if (lingers)
          answer.body.once('end', () => {
            body?.destroy();
            endAfterBody(req, res);
          });
      },
      () => {
        if (gone.signal.aborted) return;
        if (res.headersSent) return void res.destroy();
        early({});
        body?.destroy();
        res.writeHead(502, { 'content-type': 'application/vnd.git-lfs+json', connection: 'close' });
        res.write(JSON.stringify({ message: 'The server behind the resumable-upload listener did not answer' }));
        endAfterBody(req, res);
      },
    );
  });
  // A multi-gigabyte PATCH takes as long as it takes; a silent connection does not.
  server.requestTimeout = 0;
  server.headersTimeout = 60_000;
  server.setTimeout(IDLE_MS, (socket) => socket.destroy());
  server.on('clientError', (_e, socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  log('resumable uploads listening', { port: bound });
  return {
    port: bound,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await agent.close().catch(() => undefined);
    },
  };
}

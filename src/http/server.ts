import uws, { type HttpRequest, type HttpResponse, type TemplatedApp, type us_listen_socket } from '@trufflesuite/uws-js-unofficial';
import { ERROR_CODES } from '../errors/codes.js';
import { lfsError } from '../errors/errors.js';
import { LFS_JSON } from '../protocol/media-types.js';
import { StartRefusedError } from '../errors/start-refused.js';
import type { Metrics } from '../metrics/registry.js';
import { UwsRequestContext, type RequestContext } from './context.js';
import type { RequestLog } from './request-log.js';
import { sendError } from './respond.js';

export type Handler = (ctx: RequestContext) => void | Promise<void>;
type Method = 'get' | 'head' | 'post' | 'put' | 'patch' | 'options' | 'del' | 'any';
export type Logger = (msg: string, fields: object) => void;
/** One route and status's request counter and duration histogram, bound to their labels. */
interface RequestSeries {
  readonly count: ReturnType<Metrics['requests']['labels']>;
  readonly seconds: ReturnType<Metrics['requestSeconds']['labels']>;
}

/**
 * The only module that owns the uWS app: the route table, the abort wiring and the single error
 * boundary (docs/architecture.md, "Conventions"). Handlers throw; this turns what they throw into the LFS error body.
 */
export class HttpServer {
  readonly #app: TemplatedApp = uws.App();
  readonly #metrics: Metrics;
  readonly #log: Logger;
  readonly #requestLog: RequestLog | null;
  readonly #inFlight = new Set<UwsRequestContext>();
  /** Answered mid-body, their connections still discarding the rest of the body (Linger). */
  readonly #lingering = new Set<RequestContext>();
  #listenSocket: us_listen_socket | null = null;
  /** Route shapes with their methods, to answer 405 (with Allow) rather than 404 for a known path. */
  readonly #patterns: { re: RegExp; methods: string[] }[] = [];
  #closing = false;
  #idle: (() => void) | null = null;
  /** The request series per route and status, labels hashed once rather than per request. */
  readonly #series = new Map<string, RequestSeries>();

  constructor(metrics: Metrics, log: Logger, requestLog: RequestLog | null) {
    this.#metrics = metrics;
    this.#log = log;
    this.#requestLog = requestLog;
    if (typeof (uws as unknown as { getParts?: unknown }).getParts !== 'function') {
      // The package silently falls back to a slow JS shim when the native build does not load.
      throw new Error('uWebSockets.js native build did not load on this platform; refusing to run on the fallback');
    }
  }

  route(method: Method, pattern: string, name: string, handler: Handler): this {
    const paramCount = (pattern.match(/\/:/g) ?? []).length;
    if (method !== 'any') {
      const re = new RegExp(`^${pattern.replace(/:[^/]+/g, '[^/]+')}$`);
      const entry = this.#patterns.find((p) => p.re.source === re.source);
      if (entry) entry.methods.push(method === 'del' ? 'DELETE' : method.toUpperCase());
      else this.#patterns.push({ re, methods: [method === 'del' ? 'DELETE' : method.toUpperCase()] });
    }
    this.#app[method](pattern, (res: HttpResponse, req: HttpRequest) => {
      // Nothing may escape into uWS: an exception thrown in its callback ends the process.
      let ctx: UwsRequestContext;
      try {
        ctx = new UwsRequestContext(res, req, name, paramCount);
      } catch (e) {
        answerBare500(res);
        this.#afterAnswer(null, e);
        return;
      }
      this.#run(ctx, handler);
    });
    return this;
  }

  #run(ctx: UwsRequestContext, handler: Handler): void {
    this.#inFlight.add(ctx);
    // Every step below is guarded: a throw answers 500 if nothing was answered yet, and is only
    // logged once an answer went out; none reaches uWS or becomes an unhandled rejection.
    const done = (): void => {
      this.#inFlight.delete(ctx);
      try {
        // Labels are the route's name (a template such as "download", never its oid or repository) and the status.
        const status = ctx.aborted && !ctx.responded ? 499 : ctx.status;
        const ms = performance.now() - ctx.startedAt;
        const series = this.#seriesOf(ctx.route, status);
        series.count.inc();
        series.seconds.observe(ms / 1000);
        const linger = ctx.linger;
        if (linger === null) {
          this.#requestLog?.end(ctx, status, ms);
        } else {
          // The request line waits for the discarded bytes; its time is still the answer's.
          this.#lingering.add(ctx);
          void linger.done.then(() => {
            this.#lingering.delete(ctx);
            try {
              this.#requestLog?.end(ctx, status, ms);
            } catch (e) {
              this.#afterAnswer(ctx, e);
            }
          });
        }
      } catch (e) {
        this.#afterAnswer(ctx, e);
      }
      if (this.#inFlight.size === 0 && this.#idle) this.#idle();
    };
    const fail = (e: unknown): void => {
      if (ctx.aborted) return; // the client went away: what the handler threw then is expected
      if (ctx.responded) {
        this.#afterAnswer(ctx, e);
        return;
      }
      try {
        sendError(ctx, e, this.#log);
      } catch (e2) {
        this.#afterAnswer(ctx, e2);
      }
    };
    try {
      this.#requestLog?.begin(ctx);
      // Before the route: the bytes after this head cannot be told apart from a next request.
      if (ctx.framing !== null) throw ctx.framing;
      if (this.#closing) throw lfsError('LFS_ERR_SHUTTING_DOWN', undefined, { 'Retry-After': '5', Connection: 'close' });
      const result = handler(ctx);
      if (result instanceof Promise) {
        result.then(
          () => {
            if (!ctx.responded && !ctx.aborted) fail(new Error(`handler for ${ctx.route} returned without answering`));
            done();
          },
          (e: unknown) => {
            fail(e);
            done();
          },
        );
        return;
      }
      if (!ctx.responded && !ctx.aborted) fail(new Error(`handler for ${ctx.route} returned without answering`));
    } catch (e) {
      fail(e);
    }
    done();
  }

  /** A throw once the answer went out (or while answering): logged, never rethrown into uWS. */
  #afterAnswer(ctx: RequestContext | null, e: unknown): void {
    try {
      this.#log('error after the answer', { level: 'error', request_id: ctx?.requestId ?? null, route: ctx?.route ?? null, err: String((e as Error)?.stack ?? e) });
    } catch {
      // the logger itself failed: nothing more can be done for this request
    }
  }

  #seriesOf(route: string, status: number): RequestSeries {
    const key = `${route} ${status}`;
    let series = this.#series.get(key);
    if (series === undefined) {
      // Route names are the table's own and statuses few: the map stays small.
      const labels = { route, status: String(status) };
      series = { count: this.#metrics.requests.labels(labels), seconds: this.#metrics.requestSeconds.labels(labels) };
      this.#series.set(key, series);
    }
    return series;
  }

  knownPath(url: string): string | null {
    const methods = this.#patterns.filter((p) => p.re.test(url)).flatMap((p) => p.methods);
    return methods.length > 0 ? [...new Set(methods)].join(', ') : null;
  }

  /** Listens alone on the port, or rejects with StartRefusedError saying why not. */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      // Exclusive: by default uSockets sets SO_REUSEPORT, so a second server on the same port would
      // start without complaint and the kernel would hand it a share of the connections.
      exclusiveListen(this.#app, host, port, (socket) => {
        if (!socket) {
          void whyNotListening(host, port).then((why) => reject(new StartRefusedError(`cannot listen on ${host}:${port}: ${why}`)));
          return;
        }
        this.#listenSocket = socket;
        resolve(uws.us_socket_local_port(socket));
      });
    });
  }

  /** Stop accepting, let requests finish until the deadline, then cut what is left. */
  async close(graceMs: number): Promise<void> {
    this.#closing = true;
    if (this.#listenSocket) {
      uws.us_listen_socket_close(this.#listenSocket);
      this.#listenSocket = null;
    }
    await this.#waitIdle(graceMs);
    for (const ctx of this.#inFlight) ctx.forceClose();
    for (const ctx of this.#lingering) ctx.linger?.close();
    // Cut transfers clean up after themselves (staging files removed); give that a moment.
    await this.#waitIdle(2000);
  }

  #waitIdle(ms: number): Promise<void> {
    if (this.#inFlight.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.#idle = () => {
        clearTimeout(timer);
        this.#idle = null;
        resolve();
      };
    });
  }
}

/** The 500 for a request whose context could not even be built (no request id yet). */
function answerBare500(res: HttpResponse): void {
  try {
    res.cork(() => {
      res.writeStatus('500 Internal Server Error');
      res.writeHeader('Content-Type', LFS_JSON);
      res.end(JSON.stringify({ message: ERROR_CODES.LFS_ERR_INTERNAL.message }));
    });
  } catch {
    // the response cannot be written either: the caller logs the first error
  }
}

/** uWS's listen(host, port, options, cb), which its type declarations leave out. */
function exclusiveListen(app: TemplatedApp, host: string, port: number, cb: (socket: us_listen_socket | false) => void): void {
  const listen = app.listen as unknown as (h: string, p: number, options: number, cb: (socket: us_listen_socket | false) => void) => TemplatedApp;
  listen.call(app, host, port, (uws as unknown as { LIBUS_LISTEN_EXCLUSIVE_PORT: number }).LIBUS_LISTEN_EXCLUSIVE_PORT, cb);
}

/** uWS gives no reason for a failed listen: ask the system by trying the same bind once. */
async function whyNotListening(host: string, port: number): Promise<string> {
  // Imported here: node:net is needed only when a listen failed.
  const { connect, createServer } = await import('node:net');
  const code = await new Promise<string | null>((resolve) => {
    const probe = createServer();
    probe.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    probe.listen(port, host, () => probe.close(() => resolve(null)));
  });
  if (code === 'EADDRINUSE') {
    // A server, or a connection that took the port as its own end (the kernel hands out ports of
    // its ephemeral range to outgoing connections too): only a server answers a connect.
    const target = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
    const listening = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: target, port }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    return listening ? 'the port is in use (another server is listening on it)' : 'the port is in use (held by another socket, such as a connection that has it as its local port)';
  }
  if (code === 'EACCES') return 'permission denied';
  if (code === 'EADDRNOTAVAIL') return 'the address is not one of this host\'s';
  return code ?? 'refused by the HTTP layer';
}

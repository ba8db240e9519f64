import { parseRepoName } from '../protocol/repo-name.js';
import { parseAuthorization } from './auth.js';
import type { RequestContext } from './context.js';

/** Where a request line goes (the server's logger). */
export type LineLogger = (msg: string, fields: object) => void;

export interface RequestLogOptions {
  /** SVC_TRUST_PROXY: take the client from X-Forwarded-For (the entry our proxy appended). */
  readonly trustProxy: boolean;
  /** The forge user id behind a token when already known; never a forge call, never the token. */
  readonly userIdOf: (token: string) => string | null;
}

/**
 * One JSON line per request (SVC_LOG_REQUESTS): who asked (client address, forge user id), about
 * which repository, what came of it (status, time) and the body bytes each way. The peer address
 * is read when the request arrives: uWS's response object may not be touched once it is answered.
 */
export class RequestLog {
  readonly #log: LineLogger;
  readonly #opts: RequestLogOptions;
  readonly #peers = new WeakMap<RequestContext, string>();

  constructor(log: LineLogger, opts: RequestLogOptions) {
    this.#log = log;
    this.#opts = opts;
  }

  /** Call while the request's handler runs synchronously (the response object is valid). */
  begin(ctx: RequestContext): void {
    this.#peers.set(ctx, Buffer.from(ctx.res.getRemoteAddressAsText()).toString('latin1'));
  }

  /** The request line, once the answer is finished (or the client went away: status 499). */
  end(ctx: RequestContext, status: number, ms: number): void {
    // Looked up, never validated: a token no forge could accept is simply nobody's (the route refuses it).
    const token = parseAuthorization(ctx.header('authorization'));
    this.#log('request', {
      request_id: ctx.requestId,
      method: ctx.method,
      route: ctx.route,
      status,
      ms: Math.round(ms * 10) / 10,
      repo: repositoryOf(ctx),
      user_id: token === null ? null : this.#userIdOf(token),
      client: this.#client(ctx),
      bytes_in: ctx.bytesIn,
      bytes_out: ctx.bytesOut,
      bytes_discarded: ctx.bytesDiscarded,
    });
  }

  #userIdOf(token: string): string | null {
    try {
      return this.#opts.userIdOf(token);
    } catch {
      return null; // best-effort: a line without a user rather than no line
    }
  }

  #client(ctx: RequestContext): string | null {
    const peer = this.#peers.get(ctx) ?? null;
    if (!this.#opts.trustProxy) return peer;
    // Each proxy appends the address it got the request from; entries before the last one are
    // whatever the client claimed, so only the last (written by our own proxy) is trusted.
    const forwarded = ctx.header('x-forwarded-for').split(',').pop()?.trim() ?? '';
    return /^[0-9A-Fa-f.:[\]]{2,64}$/.test(forwarded) ? forwarded : peer;
  }
}

/** `org/repo` of the repository routes (all of them start with /:org/:repo); null elsewhere. */
function repositoryOf(ctx: RequestContext): string | null {
  if (ctx.params.length < 2) return null;
  return parseRepoName(ctx.params[0]!, ctx.params[1]!)?.key ?? null;
}

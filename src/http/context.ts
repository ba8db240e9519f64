import type { HttpRequest, HttpResponse } from '@trufflesuite/uws-js-unofficial';
import type { LfsError } from '../errors/errors.js';
import { framingError } from './framing.js';
import type { Linger } from './request-body.js';

/**
 * What a handler knows of one request. uWS's HttpRequest lives only during the synchronous part of
 * the handler, so everything a handler may need later is copied here up front.
 */
export interface RequestContext {
  readonly res: HttpResponse;
  readonly method: string;
  readonly url: string;
  readonly query: string;
  readonly params: readonly string[];
  readonly requestId: string;
  readonly route: string;
  readonly startedAt: number;
  /**
   * Aborted when the client goes away or the server is forced down. Made on first use: only forge
   * lookups need one (an AbortController is not free); the hot path uses onAbort.
   */
  readonly signal: AbortSignal;
  /** Runs `listener` once when the client goes away; returns a function that removes it. */
  onAbort(listener: () => void): () => void;
  header(name: string): string;
  /** True once the client disconnected; `res` must not be touched after that. */
  readonly aborted: boolean;
  responded: boolean;
  status: number;
  /** Bytes of request body still on the wire when the handler answered (drained or cut). */
  bodyPending: boolean;
  /**
   * The body ended with the socket paused, which keeps uWS's idle timer off while the answer is
   * prepared; the answer resumes it (respond.ts). See BodyPump.
   */
  parked: boolean;
  /** Request body bytes received, and response body bytes handed to uWS (the request line's figures). */
  bytesIn: number;
  bytesOut: number;
  /** Body bytes read and thrown away: of a refused body, or of one no reader takes. */
  bytesDiscarded: number;
  /** The client said `Connection: close` (uWS's test: a value of five characters): uWS closes at the response's end. */
  readonly clientCloses: boolean;
  /** Set once a refusal was answered mid-body to such a client: the rest of the body is discarded, then the connection closed. */
  linger: Linger | null;
}

const HEADERS_KEPT = new Set([
  'authorization',
  'content-type',
  'content-length',
  'transfer-encoding',
  'accept',
  'range',
  'x-lfs-object-size',
  'origin',
  'cookie',
  'host',
  'x-forwarded-for',
  // Resumable uploads (tus).
  'tus-resumable',
  'upload-offset',
]);

let counter = 0;
const prefix = Math.floor(Math.random() * 0xffffffff).toString(16).padStart(8, '0');

export class UwsRequestContext implements RequestContext {
  readonly res: HttpResponse;
  readonly method: string;
  readonly url: string;
  readonly query: string;
  readonly params: string[];
  readonly requestId: string;
  readonly route: string;
  readonly startedAt = performance.now();
  readonly #headers = new Map<string, string>();
  #abort: AbortController | null = null;
  #onAbort: (() => void)[] = [];
  #aborted = false;
  responded = false;
  status = 0;
  bodyPending = false;
  parked = false;
  /** Set when the framing headers are unreadable or conflicting: answered instead of the route, and the connection closed. */
  readonly framing: LfsError | null;
  bytesIn = 0;
  bytesOut = 0;
  bytesDiscarded = 0;
  readonly clientCloses: boolean;
  linger: Linger | null = null;

  constructor(res: HttpResponse, req: HttpRequest, route: string, paramCount: number) {
    this.res = res;
    this.route = route;
    this.method = req.getMethod();
    this.url = req.getUrl();
    this.query = req.getQuery() ?? '';
    this.params = [];
    for (let i = 0; i < paramCount; i++) this.params.push(req.getParameter(i) ?? '');
    // One pass over every header (getHeader sees only the first of a repeated one): the kept
    // values, first occurrence wins as with getHeader, and each framing header however often it came.
    const lengths: string[] = [];
    const codings: string[] = [];
    const connection: string[] = [];
    req.forEach((name, value) => {
      if (name === 'connection') connection.push(value);
      if (name === 'content-length') lengths.push(value);
      else if (name === 'transfer-encoding') codings.push(value);
      if (value !== '' && HEADERS_KEPT.has(name) && !this.#headers.has(name)) this.#headers.set(name, value);
    });
    this.framing = lengths.length + codings.length === 0 ? null : framingError(lengths, codings);
    this.clientCloses = connection[0]?.length === 5;
    this.requestId = `${prefix}-${(++counter).toString(16)}`;
    res.onAborted(() => {
      this.#aborted = true;
      // Runs inside uWS's callback, where a throw would end the process: each listener is on its own.
      for (const listener of this.#onAbort.splice(0)) {
        try {
          listener();
        } catch {
          // a cleanup that failed for a client already gone: nothing to answer
        }
      }
      try {
        this.#abort?.abort();
      } catch {
        // a signal listener threw: same as above
      }
    });
  }

  get signal(): AbortSignal {
    if (this.#abort === null) {
      this.#abort = new AbortController();
      if (this.#aborted) this.#abort.abort();
    }
    return this.#abort.signal;
  }

  onAbort(listener: () => void): () => void {
    if (this.#aborted) {
      queueMicrotask(listener);
      return () => undefined;
    }
    this.#onAbort.push(listener);
    return () => {
      const i = this.#onAbort.indexOf(listener);
      if (i >= 0) this.#onAbort.splice(i, 1);
    };
  }

  get aborted(): boolean {
    return this.#aborted;
  }

  header(name: string): string {
    return this.#headers.get(name) ?? '';
  }

  forceClose(): void {
    if (!this.aborted && !this.responded) this.res.close();
  }
}

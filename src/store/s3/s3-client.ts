import { Agent, request, type Dispatcher } from 'undici';
import { readCappedText } from '../../util/read-capped.js';
import { LfsError } from '../../errors/errors.js';
import type { CredentialsProvider } from './credentials/credentials-cache.js';
import { MAX_PRESIGN_SECONDS, presign, signHeaders, UNSIGNED_PAYLOAD, EMPTY_SHA256 } from './sigv4.js';

/** Where the bucket is and how to reach it (from SVC_S3_*). */
export interface S3Location {
  /** Endpoint origin, e.g. https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:9000. */
  readonly endpoint: string;
  readonly bucket: string;
  readonly region: string;
  /** Path-style (`endpoint/bucket/key`, MinIO, s3rver) rather than virtual-hosted (`bucket.endpoint/key`). */
  readonly pathStyle: boolean;
  /** Asked for the current credentials at each request (cached; renewed before they expire). */
  readonly credentials: CredentialsProvider;
  /** Seconds the bucket may stay silent (SVC_S3_DEADLINE); DEFAULT_S3_DEADLINE_S when absent. */
  readonly deadline?: number;
}

/** A failed S3 answer: the HTTP status and S3's own error code (NoSuchKey, SignatureDoesNotMatch …). */
export class S3ResponseError extends Error {
  override name = 'S3ResponseError';
  readonly status: number;
  readonly s3Code: string;
  constructor(status: number, s3Code: string, message: string) {
    super(message);
    this.status = status;
    this.s3Code = s3Code;
  }
}

/** A presigned URL and the seconds it lives (capped by its credentials' remaining life). */
export interface PresignedUrl {
  readonly href: string;
  readonly expiresIn: number;
}

/** S3 codes for a session token that expired or was revoked before its stated expiry. */
const EXPIRED_CODES = new Set(['ExpiredToken', 'TokenRefreshRequired', 'InvalidToken']);

/** One S3 answer with its body still to be read (or discarded). */
export interface S3Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Dispatcher.ResponseData['body'];
}

/** One request to the bucket: method, key (relative to the bucket), query, extra signed headers, body. */
export interface S3Call {
  readonly method: 'GET' | 'HEAD' | 'PUT' | 'POST' | 'DELETE';
  readonly key: string;
  readonly query?: ReadonlyArray<readonly [string, string]>;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: Uint8Array | string;
  /** Hex sha256 of the body, or UNSIGNED_PAYLOAD (the default for non-empty bodies). */
  readonly payloadHash?: string;
  /** Statuses returned rather than thrown besides 2xx (e.g. 404 for a HEAD). */
  readonly accept?: readonly number[];
  readonly signal?: AbortSignal;
}

/** Pauses before sending a request again after a connection-level failure (no answer at all). */
const RETRIES = [50, 250, 1000];

/** SVC_S3_DEADLINE's default: a bucket silent this long is down, not slow. */
export const DEFAULT_S3_DEADLINE_S = 10;

/**
 * The slowest pace a request body is allowed to go out at (bytes per second): its answer's deadline
 * grows by a second per MiB sent, so a part upload on a modest link is not cut for its size.
 */
const MIN_SEND_RATE = 1 << 20;

/** Requests the bucket may receive twice to the same effect; the others (multipart create and complete: POST) are sent once. */
const IDEMPOTENT: ReadonlySet<S3Call['method']> = new Set(['GET', 'HEAD', 'PUT', 'DELETE']);

/**
 * The one way this server talks to the bucket: undici with deadlines, every request signed with
 * SigV4 (no aws-sdk) with the credentials the provider holds now. Network failures, 5xx answers,
 * deadlines passed and credentials that cannot be had become LFS_ERR_NOT_READY (503, Retry-After),
 * so a bucket outage reaches the client as a clear, retriable 503.
 *
 * Deadlines (SVC_S3_DEADLINE, D): connecting, D; the answer's headers, D plus a second per MiB of
 * the request body, for all attempts together (the retries of an idempotent request only use what
 * is left of it); the answer's body, D between two pieces of it (progress, not a total: a large
 * download from a slow bucket goes on as long as bytes keep coming).
 */
export class S3Client {
  readonly #loc: S3Location;
  #dispatcher: Dispatcher;
  readonly #origin: string;
  readonly #host: string;
  readonly #basePath: string;
  readonly #deadlineMs: number;

  constructor(loc: S3Location) {
    this.#loc = loc;
    this.#deadlineMs = (loc.deadline ?? DEFAULT_S3_DEADLINE_S) * 1000;
    const url = new URL(loc.endpoint);
    if (loc.pathStyle) {
      this.#origin = url.origin;
      this.#host = url.host;
      this.#basePath = `/${loc.bucket}/`;
    } else {
      this.#host = `${loc.bucket}.${url.host}`;
      this.#origin = `${url.protocol}//${this.#host}`;
      this.#basePath = '/';
    }
    this.#dispatcher = this.#pool();
  }

  #pool(): Dispatcher {
    return new Agent({
      connect: { timeout: this.#deadlineMs },
      headersTimeout: this.#deadlineMs,
      bodyTimeout: this.#deadlineMs,
      keepAliveTimeout: 30_000,
      connections: 64,
    });
  }

  /**
   * After a deadline passed on `failed`: a fresh pool for the requests to come. The idle keep-alive
   * connections of the old one may be as dead as the one that just went silent (a partition keeps
   * no state, a peer that hung never closes them), and each would cost a request its deadline.
   * Requests still running on the old pool finish there (each under its own deadline).
   */
  #renewPool(failed: Dispatcher): void {
    if (failed !== this.#dispatcher) return; // renewed already
    this.#dispatcher = this.#pool();
    void failed.close().catch(() => undefined);
  }

  get bucket(): string {
    return this.#loc.bucket;
  }

  /**
   * Raw path of a key (bucket prefix in path style); keys are built by this code from safe characters.
   * A bucket-level call (key '') goes to `/bucket`, as the AWS SDKs send it: s3rver signs that path
   * without a trailing slash, so `/bucket/` got 403 SignatureDoesNotMatch on every listing.
   */
  #path(key: string): string {
    return key === '' && this.#basePath !== '/' ? this.#basePath.slice(0, -1) : `${this.#basePath}${key}`;
  }

  /** Sends one signed request; throws S3ResponseError for an S3 refusal and a 503 LfsError for an outage. */
  async send(call: S3Call): Promise<S3Reply> {
    const body = call.body;
    const payloadHash = call.payloadHash ?? (body === undefined || body.length === 0 ? EMPTY_SHA256 : UNSIGNED_PAYLOAD);
    const path = this.#path(call.key);
    const query = call.query ?? [];
    const credentials = await this.#loc.credentials.current();
    const headers = signHeaders({ credentials, region: this.#loc.region }, { method: call.method, host: this.#host, path, query, headers: call.headers ?? {} }, payloadHash);
    const qs = query.length === 0 ? '' : `?${query.map(([k, v]) => (v === '' ? encodeURIComponent(k) : `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)).join('&')}`;
    let res: Dispatcher.ResponseData | null = null;
    const size = body === undefined ? 0 : typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
    const budget = this.#deadlineMs + Math.ceil((size / MIN_SEND_RATE) * 1000);
    const started = performance.now();
    // Every body here is a buffer (parts are buffered, never streamed), so a request that failed before
    // any answer (typically a pooled keep-alive connection the bucket closed at that moment) is sent
    // again when it is idempotent and the deadline leaves room: S3 PUTs, part uploads, GETs, HEADs and
    // DELETEs are (docs/architecture.md, "Conventions").
    for (let attempt = 0; res === null; attempt++) {
      const left = budget - (performance.now() - started);
      // The whole wait for an answer, connecting included: undici's own timeouts count each phase apart.
      const deadline = new AbortController();
      const timer = setTimeout(() => deadline.abort(deadlinePassed(budget)), left);
      const dispatcher = this.#dispatcher;
      try {
        res = await request(`${this.#origin}${encodePathForUrl(path)}${qs}`, {
          method: call.method,
          headers,
          body,
          dispatcher,
          signal: call.signal === undefined ? deadline.signal : AbortSignal.any([call.signal, deadline.signal]),
          headersTimeout: Math.max(1, Math.ceil(left)),
        });
      } catch (e) {
        if (call.signal?.aborted) throw e;
        if (deadline.signal.aborted || isTimeout(e)) this.#renewPool(dispatcher);
        const pause = RETRIES[attempt];
        if (!IDEMPOTENT.has(call.method) || pause === undefined || performance.now() - started + pause >= budget) throw unavailable(deadline.signal.aborted ? deadline.signal.reason : e);
        await new Promise((r) => setTimeout(r, pause));
      } finally {
        clearTimeout(timer);
      }
    }
    if ((res.statusCode >= 200 && res.statusCode < 300) || call.accept?.includes(res.statusCode)) {
      return { status: res.statusCode, headers: res.headers, body: res.body };
    }
    const text = await readCappedText(res.body, 64 << 10, () => new Error('S3 answer too large')).catch(() => '');
    const code = /<Code>([^<]*)<\/Code>/.exec(text)?.[1] ?? `HTTP${res.statusCode}`;
    const message = /<Message>([^<]*)<\/Message>/.exec(text)?.[1] ?? '';
    if (res.statusCode >= 500) throw unavailable(new Error(`${code} ${message}`.trim()));
    if (EXPIRED_CODES.has(code)) {
      // Revoked or expired early: new credentials are loaded, and this request is retriable.
      this.#loc.credentials.invalidate(credentials);
      throw unavailable(new Error(code));
    }
    throw new S3ResponseError(res.statusCode, code, `S3 ${call.method} answered ${res.statusCode} ${code}${message ? `: ${message}` : ''}`);
  }

  /** Sends a request whose answer body is small XML (or empty) and returns it as text. */
  async sendText(call: S3Call): Promise<{ status: number; headers: S3Reply['headers']; text: string }> {
    const r = await this.send(call);
    const text = await readCappedText(r.body, 16 << 20, () => new Error('S3 answer too large')).catch((e: unknown) => {
      throw isTransportError(e) ? unavailable(e) : e;
    });
    return { status: r.status, headers: r.headers, text };
  }

  /**
   * A presigned URL for one request on `key` (docs/behaviour.md, "Object storage (S3)"). It dies with the session
   * token it carries, so it lives at most as long as the current credentials: asking for more gets
   * less, and `expiresIn` says how much.
   */
  presign(method: 'GET' | 'PUT', key: string, expiresIn: number, signedHeaders: Readonly<Record<string, string>> = {}): PresignedUrl {
    const credentials = this.#loc.credentials.held();
    const now = new Date();
    const left = credentials.expiration === null ? Infinity : Math.floor((credentials.expiration.getTime() - now.getTime()) / 1000);
    const seconds = Math.max(1, Math.min(Math.floor(expiresIn), MAX_PRESIGN_SECONDS, left));
    const href = presign({ credentials, region: this.#loc.region }, { method, host: this.#host, path: this.#path(key), query: [], headers: signedHeaders }, this.#origin, seconds, now);
    return { href, expiresIn: seconds };
  }

  async close(): Promise<void> {
    this.#loc.credentials.close();
    await this.#dispatcher.close();
  }
}

/** The path as it goes on the wire: each segment encoded once, as it was signed. */
function encodePathForUrl(path: string): string {
  return path.split('/').map((s) => encodeURIComponent(s)).join('/');
}

/** The bucket gave no answer within a request's deadline. */
function deadlinePassed(ms: number): Error {
  return Object.assign(new Error(`the bucket did not answer within ${(ms / 1000).toFixed(1)} s`), { code: 'S3_DEADLINE' });
}

/** undici's own deadlines: connecting, or waiting for an answer's headers. */
function isTimeout(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT';
}

/** undici's own names for a connection that failed or a deadline it enforced (a body stalled past bodyTimeout). */
export function isTransportError(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('UND_ERR_') || code === 'ECONNRESET' || code === 'EPIPE' || code === 'S3_DEADLINE');
}

/** A bucket that cannot be reached, or answers 5xx: 503 with Retry-After, nothing recorded. */
export function unavailable(cause: unknown): Error {
  const code = (cause as { code?: string })?.code ?? (cause as Error)?.message ?? 'unknown';
  return new LfsError('LFS_ERR_NOT_READY', `The object store cannot be reached right now (${code}); retry later`, { cause, headers: { 'Retry-After': '10' } });
}


/** Reads and drops a body (so the connection can be reused). */
export async function discard(body: AsyncIterable<Buffer>): Promise<void> {
  for await (const _ of body) void _;
}

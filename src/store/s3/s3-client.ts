import { Agent, request, type Dispatcher } from 'undici';
import { readCappedText } from '../../util/read-capped.js';
import { LfsError } from '../../errors/errors.js';
import type { CredentialsProvider } from './credentials/credentials-cache.js';
import { MAX_PRESIGN_SECONDS, presign, signHeaders, UNSIGNED_PAYLOAD, EMPTY_SHA256 } from './sigv4.js';

export interface S3Location {
  readonly endpoint: string;
  readonly bucket: string;
  readonly region: string;
  /** Path-style (`endpoint/bucket/key`, MinIO, s3rver) rather than virtual-hosted (`bucket.endpoint/key`). */
  readonly pathStyle: boolean;
  readonly credentials: CredentialsProvider;
  /** Seconds the bucket may stay silent (SVC_S3_DEADLINE); DEFAULT_S3_DEADLINE_S when absent. */
  readonly deadline?: number;
}

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

export interface PresignedUrl {
  readonly href: string;
  readonly expiresIn: number;
}

/** S3 codes for a session token that expired or was revoked before its stated expiry. */
const EXPIRED_CODES = new Set(['ExpiredToken', 'TokenRefreshRequired', 'InvalidToken']);

export interface S3Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Dispatcher.ResponseData['body'];
}

export interface S3Call {
  readonly method: 'GET' | 'HEAD' | 'PUT' | 'POST' | 'DELETE';
  readonly key: string;
  readonly query?: ReadonlyArray<readonly [string, string]>;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: Uint8Array | string;
  readonly payloadHash?: string;
  /** Statuses returned rather than thrown besides 2xx (e.g. 404 for a HEAD). */
  readonly accept?: readonly number[];
  readonly signal?: AbortSignal;
}

const RETRIES = [50, 250, 1000];

/** SVC_S3_DEADLINE's default: a bucket silent this long is down, not slow. */
export const DEFAULT_S3_DEADLINE_S = 10;

/** Slowest pace a request body may go out at: the answer's deadline grows a second per MiB sent. */
const MIN_SEND_RATE = 1 << 20;

/** Requests the bucket may receive twice to the same effect; the others (multipart create and complete: POST) are sent once. */
const IDEMPOTENT: ReadonlySet<S3Call['method']> = new Set(['GET', 'HEAD', 'PUT', 'DELETE']);

/**
 * The one way this server talks to the bucket: undici, SigV4 (no aws-sdk). Outages become 503
 * LFS_ERR_NOT_READY with Retry-After. Deadlines (SVC_S3_DEADLINE, D): connecting, D; headers, D plus a
 * second per MiB sent, for all attempts together; the body, D between two pieces.
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

  /** After a deadline: a fresh pool, since the old one's idle connections may be as dead. */
  #renewPool(failed: Dispatcher): void {
    if (failed !== this.#dispatcher) return; // renewed already
    this.#dispatcher = this.#pool();
    void failed.close().catch(() => undefined);
  }

  get bucket(): string {
    return this.#loc.bucket;
  }

  /** Raw path of a key; a bucket-level call (key '') goes to `/bucket` without a trailing slash, as the AWS SDKs send it. */
  #path(key: string): string {
    return key === '' && this.#basePath !== '/' ? this.#basePath.slice(0, -1) : `${this.#basePath}${key}`;
  }

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
    // Every body is a buffer, so a request that got no answer is sent again when it is idempotent
    // and the deadline leaves room (docs/architecture.md, "Conventions").
    for (let attempt = 0; res === null; attempt++) {
      const left = budget - (performance.now() - started);
      // The whole wait for an answer: undici's own timeouts count each phase apart.
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
      this.#loc.credentials.invalidate(credentials);
      throw unavailable(new Error(code));
    }
    throw new S3ResponseError(res.statusCode, code, `S3 ${call.method} answered ${res.statusCode} ${code}${message ? `: ${message}` : ''}`);
  }

  async sendText(call: S3Call): Promise<{ status: number; headers: S3Reply['headers']; text: string }> {
    const r = await this.send(call);
    const text = await readCappedText(r.body, 16 << 20, () => new Error('S3 answer too large')).catch((e: unknown) => {
      throw isTransportError(e) ? unavailable(e) : e;
    });
    return { status: r.status, headers: r.headers, text };
  }

  /** A presigned URL (docs/behaviour.md, "Object storage (S3)"); it dies with its session token, so `expiresIn` may be less than asked. */
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

function encodePathForUrl(path: string): string {
  return path.split('/').map((s) => encodeURIComponent(s)).join('/');
}

function deadlinePassed(ms: number): Error {
  return Object.assign(new Error(`the bucket did not answer within ${(ms / 1000).toFixed(1)} s`), { code: 'S3_DEADLINE' });
}

function isTimeout(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT';
}

export function isTransportError(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('UND_ERR_') || code === 'ECONNRESET' || code === 'EPIPE' || code === 'S3_DEADLINE');
}

export function unavailable(cause: unknown): Error {
  const code = (cause as { code?: string })?.code ?? (cause as Error)?.message ?? 'unknown';
  return new LfsError('LFS_ERR_NOT_READY', `The object store cannot be reached right now (${code}); retry later`, { cause, headers: { 'Retry-After': '10' } });
}


export async function discard(body: AsyncIterable<Buffer>): Promise<void> {
  for await (const _ of body) void _;
}

import type { Dispatcher } from 'undici';
import { lfsError } from '../errors/errors.js';
import { lazyModule } from '../util/lazy-module.js';
import { readCappedText } from '../util/read-capped.js';

// Loaded with the first forge request: a server at rest has made none (and ~8 MiB stay unused).
const undici = lazyModule<typeof import('undici')>('undici');

/** One forge HTTP answer, body already read (capped) and parsed when it is JSON. */
export interface ForgeResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: unknown; // parsed JSON, or the text when not JSON
}

/**
 * The one way this server talks to a forge: undici with connect/header/body timeouts, bodies
 * capped, and network failures mapped to LFS_ERR_FORGE_UNREACHABLE (never cached, rule 7).
 */
export class ForgeHttpClient {
  #dispatcher: Dispatcher | null = null;
  readonly #timeoutMs: number;

  constructor(timeoutSeconds: number) {
    this.#timeoutMs = timeoutSeconds * 1000;
  }

  /** The connection pool, made at the first request. */
  #agent(): Dispatcher {
    return (this.#dispatcher ??= new (undici().Agent)({
      connect: { timeout: this.#timeoutMs },
      headersTimeout: this.#timeoutMs,
      bodyTimeout: this.#timeoutMs,
      keepAliveTimeout: 30_000,
      connections: 64,
    }));
  }

  /** A GET (repository lookups, user endpoints); never throws for an HTTP status, only for no answer. */
  get(url: string, headers: Record<string, string>, signal?: AbortSignal): Promise<ForgeResponse> {
    return this.#send('GET', url, headers, undefined, signal);
  }

  /** A POST with a JSON body (forge_a's installation token mint). */
  post(url: string, headers: Record<string, string>, body: unknown, signal?: AbortSignal): Promise<ForgeResponse> {
    return this.#send('POST', url, { 'content-type': 'application/json', ...headers }, JSON.stringify(body ?? {}), signal);
  }

  async #send(method: 'GET' | 'POST', url: string, headers: Record<string, string>, body: string | undefined, signal?: AbortSignal): Promise<ForgeResponse> {
    try {
      const res = await undici().request(url, {
        method,
        headers: { 'user-agent': 'stowage-lfs', accept: 'application/json', ...headers },
        body,
        dispatcher: this.#agent(),
        signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(this.#timeoutMs)]) : AbortSignal.timeout(this.#timeoutMs),
      });
      const text = await readCappedText(res.body, 1 << 20, () => Object.assign(new Error('forge response too large'), { code: 'FORGE_BODY_TOO_LARGE' }));
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // Not JSON (a proxy's error page, GitLab's plain "Retry later"): keep the text.
      }
      return { status: res.statusCode, headers: res.headers, body: parsed };
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e instanceof undici().errors.UndiciError ? e.name : 'unknown');
      throw lfsError('LFS_ERR_FORGE_UNREACHABLE', `The forge could not be reached (${code})`);
    }
  }

  async close(): Promise<void> {
    await this.#dispatcher?.close();
  }
}


/** First value of a header that undici may give as a list. */
export function header(headers: ForgeResponse['headers'], name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Seconds to wait, per the spec's forge rate-limit rule 2: the forge's Retry-After, else its
 * x-ratelimit-reset (absolute epoch seconds), else one minute; never zero.
 */
export function retryAfterSeconds(headers: ForgeResponse['headers'], nowMs: number = Date.now()): number {
  const ra = header(headers, 'retry-after');
  if (ra !== undefined) {
    if (/^\d+$/.test(ra.trim())) return Math.max(1, Number(ra.trim()));
    const at = Date.parse(ra);
    if (!Number.isNaN(at)) return Math.max(1, Math.ceil((at - nowMs) / 1000));
  }
  const reset = header(headers, 'x-ratelimit-reset') ?? header(headers, 'ratelimit-reset');
  if (reset !== undefined && /^\d+$/.test(reset.trim())) {
    return Math.max(1, Math.ceil(Number(reset.trim()) - nowMs / 1000));
  }
  return 60;
}

/** The LfsError for a forge that is rate-limiting us (spec Errors, forge rules 1–2): 503 + Retry-After. */
export function rateLimited(seconds: number): Error {
  return lfsError('LFS_ERR_FORGE_RATE_LIMITED', undefined, { 'Retry-After': String(seconds) });
}

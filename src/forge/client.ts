import type { Agent, IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { lfsError } from '../errors/errors.js';
import type { LookupBudget } from './budget.js';
import { lazyModule } from '../util/lazy-module.js';
import { readCappedText } from '../util/read-capped.js';

// Node's own HTTP client, loaded with the first forge request: forge calls are few and small, so
// undici's speed buys nothing here, and loading it costs far more memory.
const http = lazyModule<typeof import('node:http')>('node:http');
const https = lazyModule<typeof import('node:https')>('node:https');

/** One forge HTTP answer, body already read (capped) and parsed when it is JSON. */
export interface ForgeResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: unknown; // parsed JSON, or the text when not JSON
}

/** Idle keep-alive connections to a forge close after this long. */
const KEEP_ALIVE_MS = 30_000;
/** At most this many connections per forge host. */
const MAX_SOCKETS = 64;

/**
 * The one way this server talks to a forge: node:http(s) with keep-alive, a deadline on the whole
 * exchange and on silence, bodies capped, and network failures mapped to
 * LFS_ERR_FORGE_UNREACHABLE (never cached). With a budget, every call spends from it
 * before it is sent, and none is sent once it is spent (LFS_ERR_LOOKUP_BUDGET_SPENT).
 */
export class ForgeHttpClient {
  readonly #agents = new Map<'http:' | 'https:', Agent>();
  readonly #timeoutMs: number;
  readonly #budget: LookupBudget | null;

  constructor(timeoutSeconds: number, budget: LookupBudget | null = null) {
    this.#timeoutMs = timeoutSeconds * 1000;
    this.#budget = budget;
  }

  /** The connection pool of a scheme, made at its first request. */
  #agent(protocol: 'http:' | 'https:'): Agent {
    let agent = this.#agents.get(protocol);
    if (agent === undefined) {
      const options = { keepAlive: true, maxSockets: MAX_SOCKETS, timeout: KEEP_ALIVE_MS };
      agent = protocol === 'https:' ? new (https().Agent)(options) : new (http().Agent)(options);
      this.#agents.set(protocol, agent);
    }
    return agent;
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
    // Outside the try below: a spent budget is our refusal, not the forge being unreachable.
    this.#budget?.spend();
    const deadline = signal ? AbortSignal.any([signal, AbortSignal.timeout(this.#timeoutMs)]) : AbortSignal.timeout(this.#timeoutMs);
    try {
      const res = await this.#request(method, new URL(url), headers, body, deadline);
      const text = await readCappedText(res, 1 << 20, () => Object.assign(new Error('forge response too large'), { code: 'FORGE_BODY_TOO_LARGE' }));
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // Not JSON (a proxy's error page, GitLab's plain "Retry later"): keep the text.
      }
      return { status: res.statusCode ?? 0, headers: res.headers, body: parsed };
    } catch (e) {
      const code = deadline.aborted && signal?.aborted !== true ? 'timeout' : ((e as { code?: string }).code ?? (e as Error).name ?? 'unknown');
      throw lfsError('LFS_ERR_FORGE_UNREACHABLE', `The forge could not be reached (${code})`);
    }
  }

  /** The response head; its body is still to be read (a deadline reached meanwhile destroys it). */
  #request(method: string, url: URL, headers: Record<string, string>, body: string | undefined, deadline: AbortSignal): Promise<IncomingMessage> {
    const protocol = url.protocol === 'https:' ? 'https:' : 'http:';
    const send = protocol === 'https:' ? https().request : http().request;
    return new Promise<IncomingMessage>((resolve, reject) => {
      const req = send(url, {
        method,
        agent: this.#agent(protocol),
        signal: deadline,
        timeout: this.#timeoutMs, // silence on the socket: connect, head or body
        headers: {
          'user-agent': 'stowage-lfs',
          accept: 'application/json',
          ...headers,
          ...(body === undefined ? {} : { 'content-length': String(Buffer.byteLength(body)) }),
        },
      });
      req.on('timeout', () => req.destroy(Object.assign(new Error('forge silent'), { code: 'timeout' })));
      req.on('error', reject);
      req.on('response', resolve);
      req.end(body);
    });
  }

  async close(): Promise<void> {
    for (const agent of this.#agents.values()) agent.destroy();
    this.#agents.clear();
  }
}


/** First value of a header that may come as a list. */
export function header(headers: ForgeResponse['headers'], name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Seconds to wait: the forge's Retry-After, else its
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

/** The LfsError for a forge that is rate-limiting us : 503 + Retry-After, kept apart from an unreachable forge. */
export function rateLimited(seconds: number): Error {
  return lfsError('LFS_ERR_FORGE_RATE_LIMITED', undefined, { 'Retry-After': String(seconds) });
}

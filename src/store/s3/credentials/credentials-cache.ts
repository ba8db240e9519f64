import { LfsError } from '../../../errors/errors.js';
import { CredentialsError, type AwsCredentials, type CredentialSource } from './aws-credentials.js';

export interface CredentialsProvider {
  /** Valid credentials; waits for a load when none are held. Throws a 503 LfsError when none can be had. */
  current(): Promise<AwsCredentials>;
  /** The held credentials when still valid (presigned links are made synchronously); otherwise a 503 LfsError. */
  held(): AwsCredentials;
  /** Drops `credentials` if they are still the held ones (the bucket said they expired) and loads new ones. */
  invalidate(credentials: AwsCredentials): void;
  close(): void;
}

export type CredentialsLog = (msg: string, fields?: object) => void;

export interface CredentialsCacheOptions {
  readonly log: CredentialsLog;
  /** How long before expiry a refresh starts; half the remaining life when that is shorter. */
  readonly refreshAheadMs?: number;
}

/** The SDKs refresh five minutes ahead. */
const REFRESH_AHEAD_MS = 5 * 60_000;
/** Credentials are not used in their last moments (a request signed then may arrive after expiry): 5 s, or a tenth of a short life. */
const EXPIRY_SKEW_MS = 5_000;
const RETRY_MIN_MS = 1_000;
const RETRY_MAX_MS = 60_000;

/** Seconds a client waits before retrying when no credentials can be had. */
const RETRY_AFTER = '10';

/** Renews one source's credentials ahead of expiry; a failed renewal keeps the old ones until they expire. */
export class CredentialsCache implements CredentialsProvider {
  readonly #source: CredentialSource;
  readonly #log: CredentialsLog;
  readonly #aheadMs: number;
  readonly #closed = new AbortController();
  #held: AwsCredentials | null = null;
  #usableUntil = 0;
  #refreshAt = Infinity;
  #inflight: Promise<AwsCredentials> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #failing = false;

  constructor(source: CredentialSource, options: CredentialsCacheOptions) {
    this.#source = source;
    this.#log = options.log;
    this.#aheadMs = options.refreshAheadMs ?? REFRESH_AHEAD_MS;
  }

  async current(): Promise<AwsCredentials> {
    const held = this.#usable();
    if (held !== null) return held;
    try {
      return await this.refresh();
    } catch (e) {
      throw storageFault(e);
    }
  }

  held(): AwsCredentials {
    const held = this.#usable();
    if (held !== null) return held;
    this.refresh().catch(() => undefined);
    throw storageFault(null);
  }

  invalidate(credentials: AwsCredentials): void {
    if (this.#held !== credentials) return;
    this.#held = null;
    this.refresh().catch(() => undefined);
  }

  refresh(): Promise<AwsCredentials> {
    this.#inflight ??= this.#load().finally(() => (this.#inflight = null));
    return this.#inflight;
  }

  close(): void {
    this.#closed.abort();
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  /** Held credentials still inside their usable life; starts a refresh when one is due and the timer was late. */
  #usable(): AwsCredentials | null {
    if (this.#held === null) return null;
    const now = Date.now();
    if (now >= this.#usableUntil) {
      this.#expire();
      return null;
    }
    if (now >= this.#refreshAt && this.#inflight === null) this.refresh().catch(() => undefined);
    return this.#held;
  }

  async #load(): Promise<AwsCredentials> {
    let fresh: AwsCredentials | null;
    try {
      fresh = await this.#source.load(this.#closed.signal);
      if (fresh === null) throw new CredentialsError(`${this.#source.name}: not set up`);
      if (fresh.expiration !== null && fresh.expiration.getTime() <= Date.now()) {
        throw new CredentialsError(`${this.#source.name}: handed out credentials that expired at ${fresh.expiration.toISOString()}`);
      }
    } catch (e) {
      if (!this.#closed.signal.aborted) this.#failed(e);
      throw e;
    }
    this.#accept(fresh);
    return fresh;
  }

  #accept(fresh: AwsCredentials): void {
    const now = Date.now();
    this.#held = fresh;
    const expires = fresh.expiration?.getTime() ?? Infinity;
    const life = expires - now;
    this.#usableUntil = expires - Math.min(EXPIRY_SKEW_MS, life / 10);
    this.#refreshAt = expires - Math.min(this.#aheadMs, life / 2);
    const fields = { source: this.#source.name, expires: fresh.expiration?.toISOString() ?? 'never' };
    this.#log(this.#failing ? 'S3 credentials renewed after failures' : 'S3 credentials loaded', fields);
    this.#failing = false;
    if (this.#refreshAt !== Infinity) this.#schedule(Math.max(RETRY_MIN_MS, this.#refreshAt - now), () => this.refresh());
  }

  #failed(e: unknown): void {
    const held = this.#held !== null && Date.now() < this.#usableUntil;
    if (!held) this.#expire();
    if (!this.#failing) {
      this.#failing = true;
      this.#log(held ? 'S3 credentials could not be renewed; the current ones stay in use until they expire' : 'S3 credentials could not be obtained; bucket requests answer 503 until they can', {
        level: held ? 'warn' : 'error',
        source: this.#source.name,
        err: (e as Error)?.message ?? String(e),
        ...(held ? { expires: this.#held!.expiration?.toISOString() } : {}),
      });
    }
    if (!held) return; // nothing held: the next request loads again
    const remaining = this.#usableUntil - Date.now();
    const delay = Math.min(RETRY_MAX_MS, Math.max(RETRY_MIN_MS, remaining / 4));
    if (delay < remaining) this.#schedule(delay, () => this.refresh());
    else this.#schedule(Math.ceil(remaining) + 1, () => this.#usable());
  }

  #expire(): void {
    if (this.#held === null) return;
    this.#held = null;
    this.#log('S3 credentials expired; bucket requests answer 503 until new ones are loaded', { level: 'error', source: this.#source.name });
  }

  #schedule(delay: number, run: () => unknown): void {
    if (this.#closed.signal.aborted) return;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      Promise.resolve(run()).catch(() => undefined);
    }, delay);
    this.#timer.unref();
  }
}

function storageFault(cause: unknown): LfsError {
  return new LfsError('LFS_ERR_NOT_READY', 'The object store cannot be used right now: its credentials could not be obtained; retry later', {
    cause: cause ?? undefined,
    headers: { 'Retry-After': RETRY_AFTER },
  });
}

import { ERROR_CODES, type ErrorCode } from './codes.js';

const kLfsError = Symbol.for('stowage.error.LfsError');

/** An error with a stable code and HTTP status; the one HTTP error boundary turns it into a Git LFS error body. */
export class LfsError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Extra response headers, e.g. Retry-After or LFS-Authenticate. */
  readonly headers: Readonly<Record<string, string>>;
  readonly [kLfsError] = true;

  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown; headers?: Record<string, string> }) {
    super(message ?? ERROR_CODES[code].message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'LfsError';
    this.code = code;
    this.status = ERROR_CODES[code].status;
    this.headers = options?.headers ?? {};
  }
}

/** Brand check that survives duplicate module copies (undici's isErrorLike approach). */
export function isLfsError(e: unknown): e is LfsError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[kLfsError] === true;
}

export function lfsError(code: ErrorCode, message?: string, headers?: Record<string, string>): LfsError {
  return new LfsError(code, message, headers ? { headers } : undefined);
}

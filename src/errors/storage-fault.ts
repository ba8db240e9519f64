import { LfsError } from './errors.js';

/** How long a client is asked to wait after an I/O error of the store or the index. */
const RETRY_AFTER_S = '30';

/** A PostgreSQL that cannot answer now: class 08, 57P01–57P03, 53300 (https://www.postgresql.org/docs/current/errcodes-appendix.html). */
function pgUnavailable(code: string): boolean {
  return code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300';
}

/** Connection failures to the index database or a bucket, ours included (pg-client.ts, s3-client.ts deadlines). */
const UNREACHABLE = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'EAI_AGAIN',
  'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED', 'CONNECT_TIMEOUT',
  'INDEX_DEADLINE', 'S3_DEADLINE',
  'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED',
]);

const SQLSTATE = /^[0-9A-Z]{5}$/;

/**
 * The storage conditions the server can name: full (ENOSPC, EDQUOT, SQLITE_FULL, 53100) is 507
 * LFS_ERR_STORAGE_FULL; an I/O error, a busy index, a folder refusing writes or an unreachable
 * PostgreSQL is 503 LFS_ERR_NOT_READY with Retry-After. The HTTP error boundary applies it to whatever
 * a route throws (docs/architecture.md, "Conventions").
 */
export function storageFault(e: unknown): LfsError | null {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return null;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new LfsError('LFS_ERR_STORAGE_FULL', undefined, { cause: e });
  if (UNREACHABLE.has(code) || (SQLSTATE.test(code) && pgUnavailable(code))) {
    // Nothing acknowledged is lost: a reference is committed before the 200, so the client retries.
    return new LfsError('LFS_ERR_NOT_READY', 'Storage cannot be reached right now (the index database or the bucket); retry later', { cause: e, headers: { 'Retry-After': RETRY_AFTER_S } });
  }
  if (code === '53100') {
    return new LfsError('LFS_ERR_STORAGE_FULL', "The index database's disk is full, so this change cannot be recorded; retry once space is freed", { cause: e });
  }
  if (code === 'SQLITE_FULL') {
    return new LfsError('LFS_ERR_STORAGE_FULL', "The server's disk is full, so this change cannot be recorded; retry once space is freed", { cause: e });
  }
  if (code === 'EIO' || code.startsWith('SQLITE_IOERR') || code === 'SQLITE_CANTOPEN' || code === 'SQLITE_BUSY') {
    return new LfsError('LFS_ERR_NOT_READY', 'Storage cannot be written right now; retry later', { cause: e, headers: { 'Retry-After': RETRY_AFTER_S } });
  }
  // An operator's fix, not the client's: /ready fails meanwhile, so a balancer sends uploads elsewhere.
  if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
    return new LfsError('LFS_ERR_NOT_READY', `The store refuses access to its files (${code}: missing permission or a read-only file system); retry later`, {
      cause: e,
      headers: { 'Retry-After': RETRY_AFTER_S },
    });
  }
  return null;
}

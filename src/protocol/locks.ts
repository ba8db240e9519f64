/** File Locking API types and validators (https://github.com/git-lfs/git-lfs/blob/main/docs/api/locking.md). Pure: no I/O. */
import { lfsError } from '../errors/errors.js';

export interface WireLock {
  readonly id: string;
  readonly path: string;
  /** "uppercase RFC 3339-formatted string with second precision" (locking.md, Create Lock). */
  readonly locked_at: string;
  /** "Optional name of the user that created the Lock" — always set here, from the forge login. */
  readonly owner: { readonly name: string };
}

export type LockPath = string & { readonly __brand: 'LockPath' };

export interface CreateLockRequest {
  readonly path: LockPath;
  /** `ref.name`; the client sends `"ref":{}` when it knows no upstream, so it may be null. */
  readonly refName: string | null;
}

export interface VerifyLocksRequest {
  readonly refName: string | null;
  readonly cursor: Cursor | null;
  readonly limit: number;
}

export interface UnlockRequest {
  readonly force: boolean;
  readonly refName: string | null;
}

export interface ListLocksQuery {
  readonly path: LockPath | null;
  readonly id: string | null;
  readonly cursor: Cursor | null;
  readonly limit: number;
  /** Accepted and kept for logs; single-branch locking ignores it (locking.md: ref is for auth only). */
  readonly refspec: string | null;
}

export type Cursor = number & { readonly __brand: 'Cursor' };

export const DEFAULT_LOCK_PAGE = 100;
export const MAX_LOCK_PAGE = 1000;
/** Longest lock path accepted, in UTF-8 bytes (PATH_MAX on Linux). */
export const MAX_LOCK_PATH_BYTES = 4096;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function badPath(message: string): never {
  throw lfsError('LFS_ERR_LOCK_BAD_PATH', message);
}

/**
 * The one spelling locks are stored under, so `./a//b.bin`, `a\b.bin` and `a/b.bin` collide; absolute,
 * escaping (`..`), NUL and empty paths get 422. Matching is byte-exact.
 */
export function normaliseLockPath(value: unknown): LockPath {
  if (typeof value !== 'string') badPath('path must be a string');
  if (value.includes('\0')) badPath('path must not contain a NUL byte');
  if (Buffer.byteLength(value, 'utf8') > MAX_LOCK_PATH_BYTES) badPath(`path must be at most ${MAX_LOCK_PATH_BYTES} bytes`);
  // git-lfs sends `/` (filepath.ToSlash); a Windows-style separator from another tool names the same file.
  const slashed = value.replace(/\\/g, '/');
  if (slashed.startsWith('/') || /^[A-Za-z]:(\/|$)/.test(slashed)) badPath(`path must be relative to the repository root, got "${value}"`);
  const segments: string[] = [];
  for (const segment of slashed.split('/')) {
    if (segment === '' || segment === '.') continue; // `//` and `./` collapse
    if (segment === '..') {
      if (segments.length === 0) badPath(`path must not leave the repository, got "${value}"`);
      segments.pop();
      continue;
    }
    segments.push(segment);
  }
  if (segments.length === 0) badPath('path must name a file in the repository');
  return segments.join('/') as LockPath;
}

/** A page size ≥ 1, clamped to MAX_LOCK_PAGE (locking.md lets the server bound it) so a large `--limit` still pages; else 422. */
export function parseLimit(value: unknown): number {
  if (value === undefined || value === null || value === '') return DEFAULT_LOCK_PAGE;
  const n = typeof value === 'string' && /^\d{1,15}$/.test(value) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1) {
    throw lfsError('LFS_ERR_BAD_REQUEST', `limit must be a whole number from 1 to ${MAX_LOCK_PAGE}`);
  }
  return Math.min(n, MAX_LOCK_PAGE);
}

export function parseCursor(value: unknown): Cursor | null {
  if (value === undefined || value === null || value === '') return null;
  if (typeof value !== 'string' || !/^\d{1,15}$/.test(value)) throw lfsError('LFS_ERR_BAD_REQUEST', 'cursor is not one this server returned');
  return Number(value) as Cursor;
}

export function formatCursor(cursor: Cursor | number): string {
  return String(cursor);
}

/** Lock ids are base64url (the client puts them into the unlock URL unescaped). */
const LOCK_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;

export function isLockId(value: string): boolean {
  return LOCK_ID_RE.test(value);
}

export function formatLockedAt(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/** `ref` is `{name: string}` per the schema; the client sends `{}` without an upstream. */
function parseRef(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (!isRecord(value)) throw lfsError('LFS_ERR_BAD_REQUEST', 'ref must be an object like {"name": "refs/heads/main"}');
  const name = value.name;
  if (name === undefined || name === null || name === '') return null;
  if (typeof name !== 'string') throw lfsError('LFS_ERR_BAD_REQUEST', 'ref.name must be a string');
  return name;
}

export function parseCreateLockRequest(body: unknown): CreateLockRequest {
  if (!isRecord(body)) throw lfsError('LFS_ERR_BAD_REQUEST', 'Lock request must be a JSON object');
  if (body.path === undefined) badPath('path is required');
  return { path: normaliseLockPath(body.path), refName: parseRef(body.ref) };
}

export function parseVerifyLocksRequest(body: unknown): VerifyLocksRequest {
  if (body === undefined) body = {};
  if (!isRecord(body)) throw lfsError('LFS_ERR_BAD_REQUEST', 'Verify request must be a JSON object');
  return { refName: parseRef(body.ref), cursor: parseCursor(body.cursor), limit: parseLimit(body.limit) };
}

export function parseUnlockRequest(body: unknown): UnlockRequest {
  if (body === undefined) body = {};
  if (!isRecord(body)) throw lfsError('LFS_ERR_BAD_REQUEST', 'Unlock request must be a JSON object');
  const force = body.force ?? false;
  if (typeof force !== 'boolean') throw lfsError('LFS_ERR_BAD_REQUEST', 'force must be true or false');
  return { force, refName: parseRef(body.ref) };
}

export function parseListLocksQuery(query: string): ListLocksQuery {
  const q = new URLSearchParams(query);
  const path = q.get('path');
  const id = q.get('id');
  const refspec = q.get('refspec');
  return {
    // The client adds a parameter only when it is non-empty (locking/api.go).
    path: path === null || path === '' ? null : normaliseLockPath(path),
    id: id === null || id === '' ? null : id,
    cursor: parseCursor(q.get('cursor')),
    limit: parseLimit(q.get('limit')),
    refspec: refspec === null || refspec === '' ? null : refspec,
  };
}

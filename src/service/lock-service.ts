import { randomBytes } from 'node:crypto';
import type { LockIndex, LockRow } from '../db/index-types.js';
import { lfsError } from '../errors/errors.js';
import {
  formatCursor,
  formatLockedAt,
  isLockId,
  type CreateLockRequest,
  type ListLocksQuery,
  type UnlockRequest,
  type VerifyLocksRequest,
  type WireLock,
} from '../protocol/locks.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { AccessService } from './access-service.js';

export interface LockServiceOptions {
  /** Seconds after which a lock is stale and anyone with push may take it over; null = never. */
  readonly maxAge: number | null;
  readonly now?: () => number;
}

/** Outcome of a create: the new lock (201) or the lock in the way (409, with a message naming its holder). */
export type CreateLockResult =
  | { readonly kind: 'created'; readonly lock: WireLock }
  | { readonly kind: 'conflict'; readonly lock: WireLock; readonly message: string };

export interface LockList {
  locks: WireLock[];
  next_cursor?: string;
}

export interface LockVerifyList {
  ours: WireLock[];
  theirs: WireLock[];
  next_cursor?: string;
}

type Logger = (msg: string, fields: object) => void;

export function toWireLock(row: LockRow): WireLock {
  return { id: row.id, path: row.path, locked_at: formatLockedAt(row.lockedAt), owner: { name: row.ownerName } };
}

/**
 * The File Locking use cases (https://github.com/git-lfs/git-lfs/blob/main/docs/api/locking.md;
 * docs/behaviour.md, "Who may do what"). Owners are forge user ids, so a renamed login keeps its locks.
 */
export class LockService {
  readonly #locks: LockIndex;
  readonly #access: AccessService;
  readonly #maxAgeMs: number | null;
  readonly #log: Logger;
  readonly #now: () => number;

  constructor(locks: LockIndex, access: AccessService, opts: LockServiceOptions, log: Logger) {
    this.#locks = locks;
    this.#access = access;
    this.#maxAgeMs = opts.maxAge === null ? null : opts.maxAge * 1000;
    this.#now = opts.now ?? Date.now;
    this.#log = log;
  }

  /** `POST /locks`: push access, and one user per locked file (locking.md). */
  async create(token: string | null, repo: RepoName, req: CreateLockRequest, signal: AbortSignal): Promise<CreateLockResult> {
    await this.#access.authorize(token, repo, 'push', { signal }); // throws 401 for a null token
    const me = await this.#access.identify(token!, signal);
    // An app or installation token names nobody, so nobody could release its lock.
    if (me === null) throw lfsError('LFS_ERR_LOCK_NO_IDENTITY');
    const now = this.#now();
    const outcome = await this.#locks.create(
      { id: newLockId(), repo: repo.key, path: req.path, ref: req.refName, ownerId: me.id, ownerName: me.name, lockedAt: now },
      this.#maxAgeMs === null ? null : now - this.#maxAgeMs,
    );
    switch (outcome.kind) {
      case 'created':
        return { kind: 'created', lock: toWireLock(outcome.lock) };
      case 'taken_over': {
        const p = outcome.previous;
        this.#log('stale lock taken over', {
          repo: repo.key,
          path: p.path,
          previous_lock_id: p.id,
          previous_owner: p.ownerName,
          previous_owner_id: p.ownerId,
          previous_locked_at: formatLockedAt(p.lockedAt),
          age_s: Math.floor((now - p.lockedAt) / 1000),
          new_lock_id: outcome.lock.id,
          new_owner: me.name,
          new_owner_id: me.id,
        });
        return { kind: 'created', lock: toWireLock(outcome.lock) };
      }
      case 'conflict': {
        const e = outcome.existing;
        const holder = e.ownerId === me.id ? 'you' : e.ownerName;
        // The 3.3.0 client prints only `message` for a 409, so it must name the holder.
        const message = `${e.path} is already locked by ${holder} since ${formatLockedAt(e.lockedAt)} (lock ${e.id})`;
        return { kind: 'conflict', lock: toWireLock(e), message };
      }
    }
  }

  /** `GET /locks`: pull suffices. `refspec` is accepted and ignored (single-branch locking). */
  async list(token: string | null, repo: RepoName, query: ListLocksQuery, signal: AbortSignal): Promise<LockList> {
    await this.#access.authorize(token, repo, 'pull', { signal });
    const { rows, next } = await this.#select(repo, query.path, query.id, query.cursor, query.limit);
    const answer: LockList = { locks: rows.map(toWireLock) };
    if (next !== null) answer.next_cursor = next;
    return answer;
  }

  /** `POST /locks/verify`: the caller's locks and others'. A token naming no user holds none, so its push is only halted by locked files. */
  async verify(token: string | null, repo: RepoName, req: VerifyLocksRequest, signal: AbortSignal): Promise<LockVerifyList> {
    await this.#access.authorize(token, repo, 'push', { signal });
    const me = await this.#access.identify(token!, signal);
    const { rows, next } = await this.#select(repo, null, null, req.cursor, req.limit);
    const answer: LockVerifyList = { ours: [], theirs: [] };
    for (const row of rows) (me !== null && row.ownerId === me.id ? answer.ours : answer.theirs).push(toWireLock(row));
    if (next !== null) answer.next_cursor = next;
    return answer;
  }

  /** `POST /locks/{id}/unlock`: the owner, or `force` with admin (locking.md), or anyone with push once the lock is stale. */
  async unlock(token: string | null, repo: RepoName, id: string, req: UnlockRequest, signal: AbortSignal): Promise<WireLock> {
    const grant = await this.#access.authorize(token, repo, 'push', { signal });
    // Null for an app token: it owns no lock, but with admin it may still force one open.
    const me = await this.#access.identify(token!, signal);
    // The delete names this id: if the lock was released and the path locked again since, it finds
    // nothing (404), never someone else's lock.
    const lock = isLockId(id) ? await this.#locks.findById(repo.key, id) : null;
    if (lock === null) throw lfsError('LFS_ERR_LOCK_NOT_FOUND', `No lock with id ${JSON.stringify(id.slice(0, 64))} in ${repo.key}`);
    if (me === null || lock.ownerId !== me.id) {
      if (!req.force) {
        throw lfsError('LFS_ERR_LOCK_NOT_OWNER', `${lock.path} is locked by ${lock.ownerName}, not by you; releasing it needs --force (and admin permission)`);
      }
      const stale = this.#isStale(lock, this.#now());
      if (!grant.permissions.admin && me?.siteAdmin !== true && !stale) {
        throw lfsError('LFS_ERR_LOCK_FORCE_NEEDS_ADMIN', `${lock.path} is locked by ${lock.ownerName}; only a repository admin may force-release someone else's lock`);
      }
      this.#log('lock force-released', {
        repo: repo.key,
        path: lock.path,
        lock_id: lock.id,
        owner: lock.ownerName,
        owner_id: lock.ownerId,
        released_by: me?.name ?? null,
        released_by_id: me?.id ?? null,
        stale,
      });
    }
    if (!(await this.#locks.delete(repo.key, lock.id))) throw lfsError('LFS_ERR_LOCK_NOT_FOUND', `No lock with id ${JSON.stringify(id.slice(0, 64))} in ${repo.key}`);
    return toWireLock(lock);
  }

  #isStale(lock: LockRow, now: number): boolean {
    return this.#maxAgeMs !== null && now - lock.lockedAt > this.#maxAgeMs;
  }

  /** One page of locks after the cursor; a `path` or `id` filter names at most one; `next_cursor` only when more exist. */
  async #select(repo: RepoName, path: string | null, id: string | null, cursor: number | null, limit: number): Promise<{ rows: LockRow[]; next: string | null }> {
    const after = cursor ?? 0;
    if (path !== null || id !== null) {
      let row = path !== null ? await this.#locks.findByPath(repo.key, path) : null;
      if (id !== null) {
        if (path === null) row = isLockId(id) ? await this.#locks.findById(repo.key, id) : null;
        else if (row !== null && row.id !== id) row = null;
      }
      return { rows: row !== null && row.seq > after ? [row] : [], next: null };
    }
    const rows = await this.#locks.page(repo.key, after, limit + 1);
    if (rows.length <= limit) return { rows, next: null };
    rows.length = limit;
    return { rows, next: formatCursor(rows[limit - 1]!.seq) };
  }
}

/** 128 random bits as base64url (unescaped in the unlock URL), never starting with `-` or `_`, which `git lfs unlock --id` would read as a flag. */
function newLockId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (/^[A-Za-z0-9]/.test(id)) return id;
  }
}

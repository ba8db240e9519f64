import { createHash, randomBytes } from 'node:crypto';
import type { SessionIndex } from '../db/index-types.js';
import { isLfsError, lfsError } from '../errors/errors.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { PolicedAccessService } from './policed-access-service.js';

/** Someone the forge says may run this server: a site admin, or an admin of SVC_ADMIN_REPO. */
export interface DashboardUser {
  readonly id: string;
  readonly name: string;
  readonly via: 'site_admin' | 'admin_repo';
}

export interface Session {
  readonly user: DashboardUser;
  readonly createdAt: number;
  readonly expiresAt: number;
}

export interface SessionOptions {
  /** Repository whose admins are dashboard admins; null = forge site admins only. */
  readonly adminRepo: RepoName | null;
  /** Seconds a session lasts (SVC_SESSION_TTL); it is not extended by use. */
  readonly ttlSeconds: number;
}

/** sha256 of a secret, the only form in which session ids (and tokens) are kept. */
function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('base64url');
}

/**
 * Dashboard sign-in. Admins are who the forge says (site admin, or admin of SVC_ADMIN_REPO). A
 * session id is 256 random bits; only its hash is stored, so a copy of the database signs no one in.
 */
export class SessionService {
  readonly #repo: SessionIndex;
  readonly #access: PolicedAccessService;
  readonly #opts: SessionOptions;

  constructor(repo: SessionIndex, access: PolicedAccessService, opts: SessionOptions) {
    this.#repo = repo;
    this.#access = access;
    this.#opts = opts;
  }

  get ttlSeconds(): number {
    return this.#opts.ttlSeconds;
  }

  /** The dashboard user behind a forge token, or 401/403 without a Basic challenge (a browser's fetch must not pop up a password dialog). */
  async adminOf(token: string, signal: AbortSignal): Promise<DashboardUser> {
    const identity = await this.#access.identify(token, signal);
    if (identity?.siteAdmin === true) return { id: identity.id, name: identity.name, via: 'site_admin' };
    const adminRepo = this.#opts.adminRepo;
    if (adminRepo !== null) {
      try {
        await this.#access.authorizeIgnoringSettings(token, adminRepo, 'admin', { signal });
        const id = identity?.id ?? `token:${hashSecret(token).slice(0, 12)}`;
        return { id, name: identity?.name ?? `admin of ${adminRepo.name}`, via: 'admin_repo' };
      } catch (e) {
        if (!isLfsError(e)) throw e;
        if (e.code === 'LFS_ERR_AUTH_REJECTED' || e.code === 'LFS_ERR_AUTH_REQUIRED') throw lfsError('LFS_ERR_AUTH_REJECTED');
        if (e.code !== 'LFS_ERR_REPO_NOT_FOUND' && e.code !== 'LFS_ERR_FORBIDDEN' && e.code !== 'LFS_ERR_FORBIDDEN_WRITE') throw e;
      }
    }
    if (identity === null) throw lfsError('LFS_ERR_AUTH_REJECTED');
    throw lfsError('LFS_ERR_NOT_ADMIN');
  }

  /** Signs a forge admin in; the raw session id goes to the cookie, never stored. */
  async signIn(token: string, signal: AbortSignal): Promise<{ id: string; session: Session }> {
    const user = await this.adminOf(token, signal);
    const now = Date.now();
    await this.#repo.purgeExpired(now);
    const id = randomBytes(32).toString('base64url');
    const expiresAt = now + this.#opts.ttlSeconds * 1000;
    await this.#repo.insert({ idHash: hashSecret(id), userId: user.id, userName: user.name, via: user.via, createdAt: now, expiresAt });
    return { id, session: { user, createdAt: now, expiresAt } };
  }

  async find(id: string): Promise<Session | null> {
    if (id === '' || id.length > 100) return null;
    const row = await this.#repo.find(hashSecret(id), Date.now());
    if (row === null) return null;
    const via = row.via === 'site_admin' ? 'site_admin' : 'admin_repo';
    return { user: { id: row.userId, name: row.userName, via }, createdAt: row.createdAt, expiresAt: row.expiresAt };
  }

  async signOut(id: string): Promise<void> {
    if (id !== '') await this.#repo.delete(hashSecret(id));
  }
}

import { lfsError, type LfsError } from '../errors/errors.js';
import type { RepoName } from '../protocol/repo-name.js';

/** The forge's answer mapped onto our three levels (docs/behaviour.md, "How each forge's answer is read"). */
export interface Permissions {
  readonly pull: boolean;
  readonly push: boolean;
  readonly admin: boolean;
}

/** One repository lookup's outcome, already mapped by the adapter; AccessService caches it. */
export type ForgeAnswer =
  /** The forge answered with what this caller may do. `permissions.pull` may be false only for a refusal. */
  | { readonly kind: 'granted'; readonly permissions: Permissions }
  /**
   * The token is unusable (forge 401, or 403 for a missing scope): ask for credentials again.
   * `everywhere`: the forge does not know the token (401), so the refusal is cached for every repository.
   */
  | { readonly kind: 'bad_token'; readonly everywhere?: true }
  /** The token works but cannot see the repository (forge 404 / no role). */
  | { readonly kind: 'no_access' };

/** The person (or bot) behind a token, as the forge names them; used as lock owner. */
export interface Identity {
  readonly id: string;
  readonly name: string;
  /** An administrator of the whole forge instance (GitHub site_admin, GitLab is_admin, Gitea is_admin). */
  readonly siteAdmin: boolean;
}

/**
 * One forge's repository lookup. Implementations throw LfsError LFS_ERR_FORGE_RATE_LIMITED (with
 * Retry-After) or LFS_ERR_FORGE_UNREACHABLE; they never cache (AccessService does).
 */
export interface ForgeAdapter {
  /** `token` null means an anonymous lookup (is the repository public?). */
  lookup(token: string | null, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer>;
  /** Who the token belongs to (forge user endpoint); null when the forge does not say (e.g. an app token). */
  identify(token: string, signal: AbortSignal): Promise<Identity | null>;
}

/** A forge that answered, but not usefully (5xx, a body that is not the repository): never cached. */
export function forgeFailure(status: number): LfsError {
  return lfsError('LFS_ERR_FORGE_UNREACHABLE', `The forge answered ${status} while checking these credentials`);
}

/** A token the forge does not know (401): bad for every repository. */
export const UNKNOWN_TOKEN: ForgeAnswer = Object.freeze({ kind: 'bad_token', everywhere: true });

/** Read only: what an anonymous caller gets on a public repository. */
export const READ_ONLY: Permissions = Object.freeze({ pull: true, push: false, admin: false });

import { lfsError, type LfsError } from '../errors/errors.js';
import type { RepoName } from '../protocol/repo-name.js';

/** The forge's answer mapped onto our three levels (docs/behaviour.md, "How each forge's answer is read"). */
export interface Permissions {
  readonly pull: boolean;
  readonly push: boolean;
  readonly admin: boolean;
}

export type ForgeAnswer =
  /** The forge answered with what this caller may do. `permissions.pull` may be false only for a refusal. */
  | { readonly kind: 'granted'; readonly permissions: Permissions }
  /**
   * The token is unusable (forge 401, or 403 for a missing scope): ask for credentials again.
   * `everywhere`: the forge does not know the token (401), so the refusal is cached for every repository.
   */
  | { readonly kind: 'bad_token'; readonly everywhere?: true }
  | { readonly kind: 'no_access' };

export interface Identity {
  readonly id: string;
  readonly name: string;
  readonly siteAdmin: boolean;
}

/** One forge's repository lookup; throws LFS_ERR_FORGE_RATE_LIMITED or LFS_ERR_FORGE_UNREACHABLE, never caches. */
export interface ForgeAdapter {
  lookup(token: string | null, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer>;
  /** Who the token belongs to (forge user endpoint); null when the forge does not say (e.g. an app token). */
  identify(token: string, signal: AbortSignal): Promise<Identity | null>;
}

/** A forge that answered, but not usefully (5xx, a body that is not the repository): never cached. */
export function forgeFailure(status: number): LfsError {
  return lfsError('LFS_ERR_FORGE_UNREACHABLE', `The forge answered ${status} while checking these credentials`);
}

export const UNKNOWN_TOKEN: ForgeAnswer = Object.freeze({ kind: 'bad_token', everywhere: true });

export const READ_ONLY: Permissions = Object.freeze({ pull: true, push: false, admin: false });

import type { SettingGuard } from '../db/index-types.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import { AccessService, type Caller, type UploadJudge } from './access-service.js';
import type { SettingsService } from './settings-service.js';

/** The AccessService every route uses: access settings checked first, here only, so every /{org}/{repo} route enforces them by authorizing. */
export class PolicedAccessService extends AccessService {
  readonly #settings: SettingsService;

  constructor(settings: SettingsService, ...args: ConstructorParameters<typeof AccessService>) {
    super(...args);
    this.#settings = settings;
  }

  override async authorize(...args: Parameters<AccessService['authorize']>): ReturnType<AccessService['authorize']> {
    await this.#settings.refresh();
    this.#settings.checkRepo(args[1], args[0]);
    return super.authorize(...args);
  }

  /** With shared settings, checked against those last read; the reference's statement confirms them (SettingsService.guard). */
  override async authorizeUpload(token: string | null, repo: RepoName, oid: Oid, caller: Caller): Promise<UploadJudge | null> {
    if (this.#settings.guard() === null) return super.authorizeUpload(token, repo, oid, caller);
    // Refused by the settings as last read: only the settings as saved now may refuse.
    if (this.#settings.refusesRepo(repo, token)) await this.#settings.refresh();
    this.#settings.checkRepo(repo, token);
    const setting = this.#settings.guard()!;
    await super.authorize(token, repo, 'push', caller);
    const settings = this.#settings;
    return {
      setting,
      async rejudge(size: number): Promise<SettingGuard> {
        await settings.refresh();
        const now = settings.guard()!;
        settings.checkRepo(repo, token);
        // The real size now: past the largest object or the quota is refused as a PUT would be.
        await settings.admitPut(repo, oid, size);
        return now;
      },
    };
  }

  /** In line only where the settings are this node's own: shared ones are read again first (authorize). */
  override authorizedInLine(...args: Parameters<AccessService['authorizedInLine']>): ReturnType<AccessService['authorizedInLine']> {
    if (this.#settings.guard() !== null || this.#settings.refusesRepo(args[1], args[0])) return null;
    return super.authorizedInLine(...args);
  }

  /** The forge's answer without the access settings: the dashboard's admin check must never be locked out by an allow list. */
  authorizeIgnoringSettings(...args: Parameters<AccessService['authorize']>): ReturnType<AccessService['authorize']> {
    return super.authorize(...args);
  }
}

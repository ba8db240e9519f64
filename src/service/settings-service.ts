import { ConfigError, parseBoolean, parseRepoPatterns, parseSize } from '../config/load.js';
import type { Config } from '../config/schema.js';
import type { ObjectIndex, SettingGuard, SettingsIndex, StatsIndex } from '../db/index-types.js';
import { lfsError } from '../errors/errors.js';
import type { Metrics } from '../metrics/registry.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import { CHALLENGE } from './access-service.js';

/** The access settings the dashboard edits (GET/PUT/DELETE /-/api/access). */
export interface AccessSettings {
  /** Token-less reads of public repositories. Off: every request needs a token. */
  readonly anonymousRead: boolean;
  /** Lower-cased `org` or `org/repo` patterns served; empty = every repository. */
  readonly allowedRepos: readonly string[];
  /** Largest object accepted for upload, bytes; 0 = no limit. */
  readonly maxObjectSize: number;
  /** Logical bytes one repository may hold; 0 = no limit. Downloads are never limited. */
  readonly repoQuota: number;
}

export interface AccessSettingsView {
  readonly anonymous_read: boolean;
  readonly allowed_repos: readonly string[];
  readonly max_object_size: number;
  readonly repo_quota: number;
  /** 'environment' (the SVC_ defaults) or 'saved' (edited on the dashboard). */
  readonly source: 'environment' | 'saved';
  readonly updated_at: string | null;
  readonly updated_by: string | null;
}

/** A per-object refusal in a batch answer (batch.md "Response Errors"). */
export interface ObjectRefusal {
  readonly code: number;
  readonly message: string;
}

/**
 * What uploads must respect. The batch asks per object, in request order, so a batch that crosses
 * the quota is refused from the first object past it; a PUT is checked again, since a client may
 * skip the batch.
 */
export interface UploadLimits {
  uploadBudget(repo: RepoName): Promise<UploadBudget>;
  /** Throws 413/507 when the object cannot be accepted; when its size is unknown, returns where to cut the body. */
  admitPut(repo: RepoName, oid: Oid, expectedSize: number | null): Promise<UploadCap | null>;
}

/** Bytes a repository's partial resumable uploads hold, but for those of `except`: counted against its quota. */
export type PartialBytes = (repoKey: string, except: Oid) => Promise<number>;

/** A batch's running account of what it may still accept: the first object past a limit is refused. */
export interface UploadBudget {
  admit(size: number): ObjectRefusal | null;
}

/** The most bytes an upload of unknown size may send, and the error to answer past it. */
export interface UploadCap {
  readonly bytes: number;
  readonly error: () => Error;
}

const SETTINGS_KEY = 'access';

/** Fields a PUT may carry; anything else is a 422, so a typo never silently does nothing. */
const FIELDS = new Set(['anonymous_read', 'allowed_repos', 'max_object_size', 'repo_quota']);

/** `*` matches within one segment; everything else literally, case-insensitively (forge names are). */
function compilePattern(pattern: string): RegExp {
  const [org, repo] = pattern.split('/');
  const seg = (s: string): string => s.split('*').map((p) => p.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')).join('[^/]*');
  return new RegExp(`^${seg(org!)}/${repo === undefined ? '[^/]+' : seg(repo)}$`);
}

/**
 * The access settings (saved in the index over the environment's defaults). With an index shared by
 * several nodes every request reads the saved row again (coalesced), so a change saved through one
 * node applies to the next request on every node.
 */
export class SettingsService implements UploadLimits {
  readonly #repo: SettingsIndex;
  readonly #stats: StatsIndex;
  readonly #objects: ObjectIndex;
  readonly #metrics: Metrics;
  readonly #defaults: AccessSettings;
  #partialBytes: PartialBytes = async () => 0;
  #current: AccessSettings;
  #patterns: RegExp[];
  #saved: { updatedAt: number; updatedBy: string } | null = null;
  /** The saved row's value as stored (JSON text), null when none: what an upload's guard compares. */
  #savedText: string | null = null;
  readonly #fresh: FreshRead | null;

  private constructor(repo: SettingsIndex, stats: StatsIndex, objects: ObjectIndex, metrics: Metrics, defaults: Config['access'], shared: boolean) {
    this.#repo = repo;
    this.#stats = stats;
    this.#objects = objects;
    this.#metrics = metrics;
    this.#defaults = { ...defaults, allowedRepos: [...defaults.allowedRepos] };
    this.#current = this.#defaults;
    this.#patterns = this.#current.allowedRepos.map(compilePattern);
    this.#fresh = shared ? new FreshRead(() => this.#load()) : null;
  }

  static async open(repo: SettingsIndex, stats: StatsIndex, objects: ObjectIndex, metrics: Metrics, defaults: Config['access'], shared: boolean): Promise<SettingsService> {
    const s = new SettingsService(repo, stats, objects, metrics, defaults, shared);
    await s.#load();
    return s;
  }

  async #load(): Promise<void> {
    const row = await this.#repo.get(SETTINGS_KEY);
    if (row === null) {
      if (this.#saved !== null || this.#savedText !== null) this.#apply(this.#defaults, null, null);
      return;
    }
    // Stored by JSON.stringify (save), so parsed and stringified again it is the stored text.
    const text = JSON.stringify(row.value);
    if (text === this.#savedText) return;
    try {
      this.#apply(this.#merge(this.#defaults, row.value), { updatedAt: row.updatedAt, updatedBy: row.updatedBy }, text);
    } catch {
      // A row this version cannot read (written by a newer one): serve the defaults rather than refuse to start.
      this.#apply(this.#defaults, null, text);
    }
  }

  /** The settings as last read, for an upload's reference statement to check; null on one node. */
  guard(): SettingGuard | null {
    return this.#fresh === null ? null : { key: SETTINGS_KEY, value: this.#savedText };
  }

  /** With a shared index: the settings as saved now (a read that starts after this call). */
  async refresh(): Promise<void> {
    if (this.#fresh !== null) await this.#fresh.read();
  }

  get current(): AccessSettings {
    return this.#current;
  }

  view(): AccessSettingsView {
    const c = this.#current;
    return {
      anonymous_read: c.anonymousRead,
      allowed_repos: c.allowedRepos,
      max_object_size: c.maxObjectSize,
      repo_quota: c.repoQuota,
      source: this.#saved === null ? 'environment' : 'saved',
      updated_at: this.#saved === null ? null : new Date(this.#saved.updatedAt).toISOString(),
      updated_by: this.#saved?.updatedBy ?? null,
    };
  }

  async save(patch: unknown, by: string): Promise<AccessSettingsView> {
    await this.refresh();
    const next = this.#merge(this.#current, patch);
    const now = Date.now();
    const value = { anonymous_read: next.anonymousRead, allowed_repos: next.allowedRepos, max_object_size: next.maxObjectSize, repo_quota: next.repoQuota };
    await this.#repo.put(SETTINGS_KEY, value, by, now);
    this.#apply(next, { updatedAt: now, updatedBy: by }, JSON.stringify(value));
    return this.view();
  }

  async reset(): Promise<AccessSettingsView> {
    await this.#repo.delete(SETTINGS_KEY);
    this.#apply(this.#defaults, null, null);
    return this.view();
  }

  #apply(next: AccessSettings, saved: { updatedAt: number; updatedBy: string } | null, text: string | null): void {
    this.#patterns = next.allowedRepos.map(compilePattern);
    this.#current = next;
    this.#saved = saved;
    this.#savedText = text;
  }

  /** Validates a patch (wire names) over `base`; a bad field is a 422 naming it. */
  #merge(base: AccessSettings, patch: unknown): AccessSettings {
    if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) throw lfsError('LFS_ERR_BAD_REQUEST', 'Access settings must be a JSON object');
    const p = patch as Record<string, unknown>;
    for (const k of Object.keys(p)) {
      if (!FIELDS.has(k)) throw lfsError('LFS_ERR_BAD_REQUEST', `Unknown access setting "${k}"; known: ${[...FIELDS].join(', ')}`);
    }
    try {
      const size = (name: string, v: unknown, fallback: number): number => {
        if (v === undefined) return fallback;
        if (v === null) return 0;
        if (typeof v === 'number') return parseSize(name, String(v), 0, 2 ** 50);
        if (typeof v === 'string') return parseSize(name, v.trim() === '' ? '0' : v.trim(), 0, 2 ** 50);
        throw new ConfigError(`${name} must be a number of bytes or a size such as 5GiB`);
      };
      let anonymousRead = base.anonymousRead;
      if (p.anonymous_read !== undefined) {
        if (typeof p.anonymous_read === 'boolean') anonymousRead = p.anonymous_read;
        else if (typeof p.anonymous_read === 'string') anonymousRead = parseBoolean('anonymous_read', p.anonymous_read);
        else throw new ConfigError('anonymous_read must be true or false');
      }
      let allowedRepos = base.allowedRepos;
      if (p.allowed_repos !== undefined) {
        const v = p.allowed_repos;
        if (typeof v === 'string') allowedRepos = parseRepoPatterns('allowed_repos', v);
        else if (Array.isArray(v) && v.every((x) => typeof x === 'string')) allowedRepos = parseRepoPatterns('allowed_repos', v.join(','));
        else throw new ConfigError('allowed_repos must be a list of organisations or org/repo patterns');
      }
      return {
        anonymousRead,
        allowedRepos,
        maxObjectSize: size('max_object_size', p.max_object_size, base.maxObjectSize),
        repoQuota: size('repo_quota', p.repo_quota, base.repoQuota),
      };
    } catch (e) {
      if (e instanceof ConfigError) throw lfsError('LFS_ERR_BAD_REQUEST', e.message);
      throw e;
    }
  }

  /**
   * The one check every /{org}/{repo} route passes through (via PolicedAccessService.authorize):
   * the allow list, then anonymous read. Runs before any forge lookup, so refused traffic costs none.
   */
  checkRepo(repo: RepoName, token: string | null): void {
    const refusal = this.#repoRefusal(repo, token);
    if (refusal === null) return;
    this.#metrics.rejections.inc({ cause: refusal.cause });
    throw refusal.error();
  }

  refusesRepo(repo: RepoName, token: string | null): boolean {
    return this.#repoRefusal(repo, token) !== null;
  }

  #repoRefusal(repo: RepoName, token: string | null): { cause: string; error: () => Error } | null {
    if (this.#patterns.length > 0) {
      // Patterns are lower-cased, like the key.
      if (!this.#patterns.some((re) => re.test(repo.key))) {
        return { cause: 'repo_not_allowed', error: () => lfsError('LFS_ERR_REPO_NOT_ALLOWED', `This server does not serve ${repo.name}: its operator allows only ${this.#current.allowedRepos.join(', ')}`) };
      }
    }
    if (token === null && !this.#current.anonymousRead) {
      return { cause: 'anonymous_read_disabled', error: () => lfsError('LFS_ERR_AUTH_REQUIRED', 'Credentials needed: anonymous access is turned off on this server', CHALLENGE) };
    }
    return null;
  }

  async uploadBudget(repo: RepoName): Promise<UploadBudget> {
    const { maxObjectSize, repoQuota } = this.#current;
    // The index's sum: every node's uploads count against the quota.
    let used = repoQuota > 0 ? (await this.#stats.repoSummary(repo.key)).logicalBytes : 0;
    return {
      admit: (size: number): ObjectRefusal | null => {
        if (maxObjectSize > 0 && size > maxObjectSize) {
          this.#metrics.rejections.inc({ cause: 'object_too_large' });
          return { code: 422, message: `Object is ${size} bytes; this server accepts objects of at most ${maxObjectSize} bytes` };
        }
        if (repoQuota > 0) {
          if (used + size > repoQuota) {
            this.#metrics.rejections.inc({ cause: 'quota_exceeded' });
            return { code: 507, message: `Repository quota of ${repoQuota} bytes reached (${used} bytes held or accepted in this batch)` };
          }
          used += size;
        }
        return null;
      },
    };
  }

  /** Where the partial uploads' bytes are counted (resumable uploads, once they are open). */
  countPartialBytes(source: PartialBytes): void {
    this.#partialBytes = source;
  }

  async admitPut(repo: RepoName, oid: Oid, expectedSize: number | null): Promise<UploadCap | null> {
    if (this.#fresh === null) return this.#admitPut(repo, oid, expectedSize);
    // Shared settings, as last read (authorizeUpload): a refusal, or a cap on a body of unknown
    // size, is decided only by the settings as saved now.
    try {
      const cap = await this.#admitPut(repo, oid, expectedSize, false);
      if (cap === null) return null;
    } catch {
      // Judged again below.
    }
    await this.refresh();
    return this.#admitPut(repo, oid, expectedSize, true);
  }

  /** `count`: a refusal counts in the rejection figures (not when the settings are to be read again first). */
  async #admitPut(repo: RepoName, oid: Oid, expectedSize: number | null, count = true): Promise<UploadCap | null> {
    const { maxObjectSize, repoQuota } = this.#current;
    // Re-sending an object the repository already holds adds nothing to its usage.
    const counts = repoQuota > 0 && (await this.#objects.findInRepo(repo.key, oid)) === null;
    const used = counts ? (await this.#stats.repoSummary(repo.key)).logicalBytes + (await this.#partialBytes(repo.key, oid)) : 0;
    const room = counts ? Math.max(0, repoQuota - used) : Infinity;
    if (maxObjectSize === 0 && room === Infinity) return null;
    const tooLarge = (): Error => {
      if (count) this.#metrics.rejections.inc({ cause: 'object_too_large' });
      return lfsError('LFS_ERR_OBJECT_TOO_LARGE', `Object is larger than the ${maxObjectSize} bytes this server accepts`);
    };
    const overQuota = (): Error => {
      if (count) this.#metrics.rejections.inc({ cause: 'quota_exceeded' });
      return lfsError('LFS_ERR_QUOTA_EXCEEDED', `Repository quota of ${repoQuota} bytes reached`);
    };
    if (expectedSize !== null) {
      if (maxObjectSize > 0 && expectedSize > maxObjectSize) throw tooLarge();
      if (expectedSize > room) throw overQuota();
      // The store refuses the first byte past the announced size, so nothing more to watch.
      return null;
    }
    // Size unknown (chunked without X-Lfs-Object-Size): the body is cut at the first byte past a limit.
    const bytes = Math.min(maxObjectSize > 0 ? maxObjectSize : Infinity, room);
    if (bytes === Infinity) return null;
    return { bytes, error: () => (maxObjectSize > 0 && bytes === maxObjectSize ? tooLarge() : overQuota()) };
  }
}

/**
 * Coalesces reads that must each see the state as of their own call: a caller joins the next read
 * to start, never one already running (it may predate the caller's change).
 */
class FreshRead {
  readonly #read: () => Promise<void>;
  #running: Promise<void> | null = null;
  #next: Promise<void> | null = null;

  constructor(read: () => Promise<void>) {
    this.#read = read;
  }

  read(): Promise<void> {
    if (this.#running === null) return this.#start();
    // One read is running: join (or queue) the read that starts once it settles.
    this.#next ??= this.#running.then(
      () => this.#start(),
      () => this.#start(),
    );
    return this.#next;
  }

  #start(): Promise<void> {
    this.#next = null;
    const p = this.#read().finally(() => {
      if (this.#running === p) this.#running = null;
    });
    this.#running = p;
    return p;
  }
}

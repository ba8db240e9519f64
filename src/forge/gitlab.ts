import type { RepoName } from '../protocol/repo-name.js';
import { rateLimited, retryAfterSeconds, type ForgeHttpClient, type ForgeResponse } from './client.js';
import { forgeFailure, READ_ONLY, UNKNOWN_TOKEN, type ForgeAdapter, type ForgeAnswer, type Identity, type Permissions } from './types.js';

/** `Ci::Build::TOKEN_PREFIX` (lib/gitlab/auth/auth_finders.rb in https://gitlab.com/gitlab-org/gitlab). */
export const JOB_TOKEN_PREFIX = 'glcbt-';

/** `Gitlab::Access` levels that matter here (https://docs.gitlab.com/ee/api/members.html#roles); any other value is compared by size. */
export const ACCESS = { REPORTER: 20, DEVELOPER: 30, MAINTAINER: 40 } as const;

/** GitLab roles onto our three levels (docs/behaviour.md, "How each forge's answer is read"); unnamed levels fall to the highest named one they reach. */
export function permissionsForLevel(level: number): Permissions | null {
  if (level >= ACCESS.MAINTAINER) return { pull: true, push: true, admin: true };
  if (level >= ACCESS.DEVELOPER) return { pull: true, push: true, admin: false };
  if (level >= ACCESS.REPORTER) return READ_ONLY;
  return null;
}

interface ProjectBody {
  readonly visibility?: unknown;
  readonly permissions?: {
    readonly project_access?: { readonly access_level?: unknown } | null;
    readonly group_access?: { readonly access_level?: unknown } | null;
  } | null;
}

/**
 * forge_b: GitLab's REST v4, `GET {api}/projects/{url-encoded org/repo}`
 * (https://docs.gitlab.com/ee/api/projects.html#get-a-single-project). The role is the higher of
 * `project_access` and `group_access`; both null for a caller who still sees the project means read
 * only (GitLab 404s what a token cannot see). CI job tokens (`glcbt-` prefix, or 401 on the project
 * endpoint) are checked with `GET {api}/job` (https://docs.gitlab.com/ee/ci/jobs/ci_job_token.html):
 * a job may read and write its own project, matched by the full path in its `web_url`, so
 * `evilgroup/acme/game` never passes for `acme/game`; other projects only when public.
 */
export class GitLabAdapter implements ForgeAdapter {
  readonly #api: string;
  readonly #http: ForgeHttpClient;
  readonly #root: string;

  constructor(apiUrl: string, http: ForgeHttpClient) {
    this.#api = apiUrl;
    this.#http = http;
    this.#root = urlRootOf(apiUrl);
  }

  async lookup(token: string | null, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer> {
    if (token !== null && token.startsWith(JOB_TOKEN_PREFIX)) return this.#jobLookup(token, repo, signal);
    const res = await this.#project(token, repo, signal);
    if (res.status === 401) {
      if (token === null) return { kind: 'no_access' };
      // Unknown as a personal token: maybe a job token from before the glcbt- prefix.
      return this.#jobLookup(token, repo, signal);
    }
    // 403: the token lacks the api/read_api scope, or its user is blocked: unusable here.
    if (res.status === 403) return token === null ? { kind: 'no_access' } : { kind: 'bad_token' };
    if (res.status === 404 || (res.status >= 300 && res.status < 400)) return { kind: 'no_access' };
    if (res.status !== 200 || typeof res.body !== 'object' || res.body === null) throw forgeFailure(res.status);
    return token === null ? anonymousAnswer(res.body as ProjectBody) : memberAnswer(res.body as ProjectBody);
  }

  async identify(token: string, signal: AbortSignal): Promise<Identity | null> {
    if (!token.startsWith(JOB_TOKEN_PREFIX)) {
      const res = await this.#http.get(`${this.#api}/user`, { authorization: `Bearer ${token}` }, signal);
      checkRateLimit(res);
      if (res.status >= 500) throw forgeFailure(res.status);
      if (res.status === 200) return userIdentity(res.body);
      if (res.status !== 401) return null;
    }
    // A job token names the user who started the pipeline.
    const job = await this.#job(token, signal);
    return job === null ? null : userIdentity(job.user);
  }

  async #project(token: string | null, repo: RepoName, signal: AbortSignal): Promise<ForgeResponse> {
    // The path must be one URL-encoded parameter, or GitLab answers 404
    // (https://docs.gitlab.com/ee/api/rest/#namespaced-paths).
    const url = `${this.#api}/projects/${encodeURIComponent(repo.name)}`;
    const res = await this.#http.get(url, token === null ? {} : { authorization: `Bearer ${token}` }, signal);
    checkRateLimit(res);
    return res;
  }

  async #jobLookup(token: string, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer> {
    const job = await this.#job(token, signal);
    if (job === null) return UNKNOWN_TOKEN;
    // GitLab paths are unique regardless of case; the whole path must match (a suffix never does).
    if (job.projectPath !== null && job.projectPath.toLowerCase() === repo.key.toLowerCase()) {
      return { kind: 'granted', permissions: { pull: true, push: true, admin: false } };
    }
    // Another project: what anybody may see of it (the project endpoint treats the job token so, too).
    const res = await this.#project(null, repo, signal);
    if (res.status === 200 && typeof res.body === 'object' && res.body !== null) return anonymousAnswer(res.body as ProjectBody);
    if (res.status >= 500) throw forgeFailure(res.status);
    return { kind: 'no_access' };
  }

  async #job(token: string, signal: AbortSignal): Promise<{ projectPath: string | null; user: unknown } | null> {
    const res = await this.#http.get(`${this.#api}/job`, { 'job-token': token }, signal);
    checkRateLimit(res);
    if (res.status >= 500) throw forgeFailure(res.status);
    if (res.status !== 200 || typeof res.body !== 'object' || res.body === null) return null;
    const body = res.body as { web_url?: unknown; user?: unknown };
    return { projectPath: projectPathOfJobUrl(body.web_url, this.#root), user: body.user };
  }
}

export function urlRootOf(apiUrl: string): string {
  let path: string;
  try {
    path = new URL(apiUrl).pathname;
  } catch {
    return '';
  }
  return path.replace(/\/+$/, '').replace(/\/api\/v4$/, '');
}

/**
 * The project path in a job's `web_url` under `root`, or null (fail closed: the job grants nothing
 * of its own). Taken as sent, never decoded, so an escape cannot make two paths look alike.
 */
export function projectPathOfJobUrl(webUrl: unknown, root = ''): string | null {
  if (typeof webUrl !== 'string') return null;
  let path: string;
  try {
    path = new URL(webUrl).pathname;
  } catch {
    return null;
  }
  if (!path.startsWith(`${root}/`)) return null;
  const m = /^\/([^?#]+?)\/-\/jobs\/\d+\/?$/.exec(path.slice(root.length));
  if (!m) return null;
  const segments = m[1]!.split('/');
  return segments.every((s) => s !== '' && s !== '.' && s !== '..') ? segments.join('/') : null;
}

/** forge_b rate-limits with 429, never a refusal; Retry-After, else RateLimit-Reset, else 60 s. */
function checkRateLimit(res: ForgeResponse): void {
  if (res.status === 429) throw rateLimited(retryAfterSeconds(res.headers));
}

function anonymousAnswer(body: ProjectBody): ForgeAnswer {
  return body.visibility === 'public' ? { kind: 'granted', permissions: READ_ONLY } : { kind: 'no_access' };
}

function levelOf(access: { readonly access_level?: unknown } | null | undefined): number {
  const level = access?.access_level;
  return typeof level === 'number' && Number.isFinite(level) ? level : -1;
}

function memberAnswer(body: ProjectBody): ForgeAnswer {
  const level = Math.max(levelOf(body.permissions?.project_access), levelOf(body.permissions?.group_access));
  const byRole = permissionsForLevel(level);
  if (byRole !== null) return { kind: 'granted', permissions: byRole };
  // No useful role, or none reported: readable when public or internal, or when no role is reported
  // for a private project it sees (group share, admin).
  if (level < 0 || body.visibility === 'public' || body.visibility === 'internal') return { kind: 'granted', permissions: READ_ONLY };
  return { kind: 'no_access' };
}

function userIdentity(user: unknown): Identity | null {
  const u = user as { id?: unknown; username?: unknown; is_admin?: unknown } | null;
  if (u === null || typeof u !== 'object' || typeof u.username !== 'string') return null;
  return { id: String(u.id ?? u.username), name: u.username, siteAdmin: u.is_admin === true };
}

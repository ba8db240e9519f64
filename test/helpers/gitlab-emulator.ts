import type { IncomingMessage, ServerResponse } from 'node:http';
import { EmulatorBase } from './base-emulator.js';

/**
 * A forge on loopback that answers the way GitLab's REST v4 does (https://docs.gitlab.com/ee/api/), rooted at
 * `{url}/api/v4`:
 * - `GET /projects/:id` with `:id` the URL-encoded path (an unencoded path does not match a route:
 *   404 `{"error":"404 Not Found"}`), `PRIVATE-TOKEN` or `Authorization: Bearer`. `JOB-TOKEN` is
 *   ignored there and a `glcbt-` value in either header is skipped as a personal token, so a job
 *   token is served as anonymous (lib/gitlab/auth/auth_finders.rb). Members get `permissions.{project_access,group_access}`,
 *   each an object or null; anonymous callers get no `permissions`.
 * - `GET /job` with `JOB-TOKEN`: the running job, with `web_url` naming its project.
 * - `GET /user`: the token's user (`is_admin` shown to admins only).
 * - Errors: 401 `{"message":"401 Unauthorized"}`, 404 `{"message":"404 Project Not Found"}`, 403
 *   `insufficient_scope`, and the expired-token 401 with its WWW-Authenticate header.
 * - Throttling: 429 with a plain-text "Retry later" body, RateLimit-* headers and Retry-After;
 *   GitLab.com's variant without Retry-After; and the application-limit JSON 429 with neither.
 */
export interface GitLabToken {
  readonly username: string;
  readonly id?: number;
  readonly isAdmin?: boolean;
  /** 'job' tokens work only on /job (and as anonymous elsewhere); `project` is the job's project. */
  readonly kind?: 'personal' | 'job';
  readonly scopes?: readonly string[];
  readonly expired?: boolean;
  /** "org/repo" → project role level (10, 20, 30, 40, 50, or anything else). */
  readonly projects?: Readonly<Record<string, number>>;
  /** group path → group role level, inherited by the group's projects. */
  readonly groups?: Readonly<Record<string, number>>;
  /** "org/repo" reachable through a group share only: visible, but both access fields are null. */
  readonly shares?: readonly string[];
  /**
   * For job tokens: the job's project, its full path ("org/repo", or deeper for a subgroup project
   * such as "evilgroup/acme/game"), and the user who started the pipeline.
   */
  readonly project?: string;
  readonly jobUser?: string;
  /** For job tokens: leave `web_url` out of the `/job` answer (a body lacking what identifies the project). */
  readonly omitWebUrl?: boolean;
}

export interface GitLabProject {
  readonly visibility: 'public' | 'internal' | 'private';
  /** Projects under a user namespace have `group_access: null` always. */
  readonly namespaceKind?: 'group' | 'user';
}

export type GitLabThrottle =
  | null
  | { kind: 'rack'; retryAfter: number; resetEpoch: number }
  | { kind: 'rack-no-retry-after'; resetEpoch: number }
  | { kind: 'application' };

export class GitLabEmulator extends EmulatorBase {
  readonly tokens = new Map<string, GitLabToken>();
  readonly repos = new Map<string, GitLabProject>();
  /** Project lookups received. */
  readonly lookups: { repo: string; token: string | null; at: number }[] = [];
  /** `GET /job` calls received. */
  readonly jobLookups: { token: string | null; at: number }[] = [];
  rateLimit: GitLabThrottle = null;
  /** GitLab's relative URL root ('' or e.g. '/gitlab'): the API answers under it, job `web_url`s carry it. */
  root = '';
  /** Host in the `web_url` of jobs (GitLab's external URL); the relative root follows it. */
  webBase = 'https://gitlab.example.com';

  /** The API root to give SVC_FORGE_B_API_URL. */
  get apiUrl(): string {
    return `${this.url}${this.root}/api/v4`;
  }

  /** A project's numeric id: stable, one per full path (the order projects were added in). */
  projectId(path: string): number {
    const ids = [...this.repos.keys()];
    const i = ids.indexOf(path);
    return i < 0 ? 100_000 + ids.length : 1000 + i;
  }

  protected handle(req: IncomingMessage, res: ServerResponse, url: URL): void {
    // Route on the raw path: an encoded %2F must stay one segment.
    const full = (req.url ?? '/').split('?')[0]!;
    const raw = full.startsWith(`${this.root}/`) ? full.slice(this.root.length) : '';
    if (!raw.startsWith('/api/v4/')) {
      this.json(res, 404, { error: '404 Not Found' });
      return;
    }
    const route = raw.slice('/api/v4'.length);
    if (this.rateLimit !== null) {
      this.#throttle(res);
      return;
    }
    const project = /^\/projects\/([^/]+)$/.exec(route);
    if (project && req.method === 'GET') {
      const key = decodeURIComponent(project[1]!);
      this.lookups.push({ repo: key, token: this.#userToken(req), at: Date.now() });
      if (!project[1]!.includes('%2F') && !/^\d+$/.test(project[1]!)) {
        this.json(res, 404, { error: '404 Not Found' });
        return;
      }
      this.#project(req, res, key);
      return;
    }
    if (route === '/job' && req.method === 'GET') {
      const token = typeof req.headers['job-token'] === 'string' ? req.headers['job-token'] : (url.searchParams.get('job_token') ?? null);
      this.jobLookups.push({ token, at: Date.now() });
      const t = token === null ? undefined : this.tokens.get(token);
      if (t === undefined || t.kind !== 'job' || t.project === undefined) {
        this.json(res, 401, { message: '401 Unauthorized' });
        return;
      }
      const user = this.#userByName(t.jobUser ?? 'ci-user');
      this.json(res, 200, {
        id: 8, status: 'running', stage: 'test', name: 'lfs', ref: 'main', tag: false, coverage: null,
        created_at: new Date().toISOString(), started_at: new Date().toISOString(),
        pipeline: { id: 6, project_id: this.projectId(t.project), ref: 'main', sha: '0ff3ae198f8601a285adcf5c0fff204ee6fba5fd', status: 'running' },
        user: { id: user?.id ?? 2, username: t.jobUser ?? 'ci-user', name: t.jobUser ?? 'CI User', state: 'active' },
        ...(t.omitWebUrl === true ? {} : { web_url: `${this.webBase}${this.root}/${t.project}/-/jobs/8` }),
        project: { ci_job_token_scope_enabled: false },
      });
      return;
    }
    if (route === '/user' && req.method === 'GET') {
      const auth = this.#authenticate(req, res);
      if (auth === 'answered') return;
      if (auth === null) {
        this.json(res, 401, { message: '401 Unauthorized' });
        return;
      }
      const body: Record<string, unknown> = { id: auth.id ?? 1, username: auth.username, name: auth.username, state: 'active' };
      if (auth.isAdmin) body.is_admin = true;
      this.json(res, 200, body);
      return;
    }
    this.json(res, 404, { error: '404 Not Found' });
  }

  #userByName(name: string): GitLabToken | undefined {
    return [...this.tokens.values()].find((t) => t.username === name && t.kind !== 'job');
  }

  /** The value of PRIVATE-TOKEN or a Bearer, if any (job tokens included; for the lookup log). */
  #userToken(req: IncomingMessage): string | null {
    const pt = req.headers['private-token'];
    if (typeof pt === 'string' && pt !== '') return pt;
    const m = /^bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
    return m ? m[1]!.trim() : null;
  }

  /**
   * GitLab's API user lookup (auth_finders.rb): PRIVATE-TOKEN or Bearer; a `glcbt-` value is
   * skipped so a job token could authenticate, but JOB-TOKEN is not allowed on these routes: the
   * caller is anonymous. Returns null for anonymous, or 'answered' when an error went out.
   */
  #authenticate(req: IncomingMessage, res: ServerResponse): GitLabToken | null | 'answered' {
    const token = this.#userToken(req);
    if (token === null || token.startsWith('glcbt-')) return null;
    const t = this.tokens.get(token);
    if (t === undefined || t.kind === 'job') {
      this.json(res, 401, { message: '401 Unauthorized' });
      return 'answered';
    }
    if (t.expired) {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer realm="Protected by OAuth 2.0", error="invalid_token", error_description="Token is expired. You can either do re-authorization or token refresh."' });
      res.end(JSON.stringify({ error: 'invalid_token', error_description: 'Token is expired. You can either do re-authorization or token refresh.' }));
      return 'answered';
    }
    const scopes = t.scopes ?? ['api'];
    if (!scopes.includes('api') && !scopes.includes('read_api')) {
      this.json(res, 403, { error: 'insufficient_scope', error_description: 'The request requires higher privileges than provided by the access token.', scope: 'api read_api' });
      return 'answered';
    }
    return t;
  }

  #project(req: IncomingMessage, res: ServerResponse, key: string): void {
    const auth = this.#authenticate(req, res);
    if (auth === 'answered') return;
    const repo = this.repos.get(key);
    // A subgroup project's namespace is every segment but the last ("evilgroup/acme" of "evilgroup/acme/game").
    const cut = key.lastIndexOf('/');
    const org = key.slice(0, cut);
    const name = key.slice(cut + 1);
    const projectLevel = auth?.projects?.[key];
    const groupLevel = repo?.namespaceKind === 'user' ? undefined : auth?.groups?.[org];
    const shared = auth?.shares?.includes(key) === true;
    // Guest (10) and up see a private project; Minimal Access (5) does not (https://docs.gitlab.com/ee/user/permissions.html).
    const member = (projectLevel ?? 0) >= 10 || (groupLevel ?? 0) >= 10 || shared;
    const visible = repo !== undefined && (repo.visibility === 'public' || (auth !== null && (repo.visibility === 'internal' || member || auth.isAdmin === true)));
    if (!visible) {
      this.json(res, 404, { message: '404 Project Not Found' });
      return;
    }
    const body: Record<string, unknown> = {
      id: this.projectId(key), name, path: name, path_with_namespace: key, default_branch: 'main', visibility: repo.visibility,
      namespace: { id: 3, name: org, path: org, kind: repo.namespaceKind ?? 'group', full_path: org },
    };
    if (auth !== null) {
      body.permissions = {
        project_access: projectLevel === undefined ? null : { access_level: projectLevel, notification_level: 3 },
        group_access: groupLevel === undefined ? null : { access_level: groupLevel, notification_level: 3 },
      };
    }
    this.json(res, 200, body);
  }

  #throttle(res: ServerResponse): void {
    const rl = this.rateLimit!;
    if (rl.kind === 'application') {
      this.json(res, 429, { message: { error: 'This endpoint has been requested too many times. Try again later.' } });
      return;
    }
    const headers: Record<string, string> = {
      'content-type': 'text/plain',
      'ratelimit-name': 'throttle_authenticated_api',
      'ratelimit-limit': '60',
      'ratelimit-observed': '67',
      'ratelimit-remaining': '0',
      'ratelimit-reset': String(rl.resetEpoch),
      'ratelimit-resettime': new Date(rl.resetEpoch * 1000).toUTCString(),
    };
    if (rl.kind === 'rack') headers['retry-after'] = String(rl.retryAfter);
    res.writeHead(429, headers);
    res.end('Retry later\n');
  }
}

import type { IncomingMessage, ServerResponse } from 'node:http';
import { basicCredentials, EmulatorBase } from './base-emulator.js';

/**
 * A forge on loopback that answers the way Gitea (`personality: 'gitea'`, 1.26 / main) or Forgejo
 * (`'forgejo'`, v12) does (https://docs.gitea.com/development/api-usage), rooted at `{url}/api/v1`:
 * - `GET /repos/{owner}/{repo}` and `GET /user`.
 * - Auth: `Authorization: token …` (scheme case-sensitive on Forgejo, case-insensitive on Gitea),
 *   `Bearer`, Basic with the token as password or as username (empty or `x-oauth-basic`
 *   password), and `?token=` on Gitea only (Forgejo v12 removed query tokens).
 * - `permissions {admin, push, pull}` always present, anonymous callers included.
 * - Actions tokens: `{admin:false, push:true, pull:true}` on their own repository (read only for a
 *   fork pull request), 404 on any other (Gitea ≤ 1.25 and Forgejo behaviour).
 * - Errors as each personality words them: 401 for an unknown token, 404 for what the caller
 *   cannot see, 403 for a scoped token without read:repository.
 * - No rate limiting of its own: a proxy's 429/503 with Retry-After is played with `outage`.
 */
export interface GiteaToken {
  readonly login: string;
  readonly id?: number;
  readonly isAdmin?: boolean;
  readonly kind?: 'user' | 'actions';
  /** Scoped tokens (Forgejo requires one); `undefined` = all (legacy unscoped Gitea token). */
  readonly scopes?: readonly string[];
  /** "org/repo" → access mode. */
  readonly repos?: Readonly<Record<string, 'admin' | 'write' | 'read' | 'none'>>;
  /** For actions tokens: the task's repository, and whether it runs for a fork pull request. */
  readonly actionsRepo?: string;
  readonly forkPullRequest?: boolean;
}

export interface GiteaRepo {
  readonly private: boolean;
}

export class GiteaEmulator extends EmulatorBase {
  readonly tokens = new Map<string, GiteaToken>();
  readonly repos = new Map<string, GiteaRepo>();
  readonly lookups: { repo: string; token: string | null; at: number }[] = [];
  readonly personality: 'gitea' | 'forgejo';

  constructor(personality: 'gitea' | 'forgejo' = 'gitea') {
    super();
    this.personality = personality;
  }

  /** The API root to give SVC_FORGE_C_API_URL. */
  get apiUrl(): string {
    return `${this.url}/api/v1`;
  }

  #swagger(): string {
    return `${this.url}/api/swagger`;
  }

  #token(req: IncomingMessage, url: URL): string | null {
    const h = req.headers.authorization ?? '';
    const space = h.indexOf(' ');
    const scheme = space < 0 ? '' : h.slice(0, space);
    const value = space < 0 ? '' : h.slice(space + 1).trim();
    if (scheme.toLowerCase() === 'bearer' && value !== '') return value;
    // Forgejo (and Gitea ≤ 1.24) match `token` case-sensitively (services/auth/oauth2.go).
    if ((this.personality === 'forgejo' ? scheme === 'token' : scheme.toLowerCase() === 'token') && value !== '') return value;
    const basic = basicCredentials(h);
    if (basic !== null) {
      const [user, password] = basic;
      return password === '' || password === 'x-oauth-basic' ? user : password;
    }
    if (this.personality === 'gitea') return url.searchParams.get('token') ?? url.searchParams.get('access_token');
    return null;
  }

  #unauthorized(res: ServerResponse): void {
    const message = this.personality === 'gitea' ? 'invalid username, password or token' : 'user does not exist [uid: 0, name: ]';
    this.json(res, 401, { message, url: this.#swagger() });
  }

  #notFound(res: ServerResponse): void {
    if (this.personality === 'gitea') this.json(res, 404, { message: 'not found', url: this.#swagger() });
    else this.json(res, 404, { message: "The target couldn't be found.", url: this.#swagger(), errors: [] });
  }

  protected handle(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (!url.pathname.startsWith('/api/v1/')) {
      this.#notFound(res);
      return;
    }
    const route = url.pathname.slice('/api/v1'.length);
    const token = this.#token(req, url);
    const repoRoute = /^\/repos\/([^/]+)\/([^/]+)$/.exec(route);
    if (repoRoute && req.method === 'GET') this.lookups.push({ repo: `${repoRoute[1]}/${repoRoute[2]}`, token, at: Date.now() });
    const who = token === null ? null : this.tokens.get(token);
    if (token !== null && who === undefined) {
      this.#unauthorized(res);
      return;
    }
    // tokenRequiresScopes (routers/api/v1/api.go): a scoped token needs read:repository / read:user.
    if (who && who.kind !== 'actions' && who.scopes !== undefined && (repoRoute || route === '/user')) {
      const category = repoRoute ? 'repository' : 'user';
      if (!who.scopes.some((s) => s === 'all' || s === `read:${category}` || s === `write:${category}`)) {
        this.json(res, 403, { message: `token does not have at least one of required scope(s): [read:${category}]`, url: this.#swagger() });
        return;
      }
    }
    if (repoRoute && req.method === 'GET') {
      const key = `${repoRoute[1]}/${repoRoute[2]}`;
      const repo = this.repos.get(key);
      if (repo === undefined) {
        this.#notFound(res);
        return;
      }
      let perms: { admin: boolean; push: boolean; pull: boolean };
      if (who?.kind === 'actions') {
        if (who.actionsRepo !== key) {
          this.#notFound(res);
          return;
        }
        perms = { admin: false, push: who.forkPullRequest !== true, pull: true };
      } else if (who?.isAdmin) {
        perms = { admin: true, push: true, pull: true };
      } else {
        const mode = who?.repos?.[key] ?? (repo.private ? undefined : 'read');
        if (mode === undefined) {
          this.#notFound(res);
          return;
        }
        perms = { admin: mode === 'admin', push: mode === 'admin' || mode === 'write', pull: mode !== 'none' };
      }
      this.json(res, 200, {
        id: 1, owner: { id: 1, login: repoRoute[1], username: repoRoute[1] }, name: repoRoute[2], full_name: key,
        private: repo.private, internal: false, default_branch: 'main', permissions: perms,
      });
      return;
    }
    if (route === '/user' && req.method === 'GET') {
      if (who === null || who === undefined) {
        this.#unauthorized(res);
        return;
      }
      if (who.kind === 'actions') {
        this.json(res, 200, { id: -2, login: 'gitea-actions', username: 'gitea-actions', full_name: 'Gitea Actions', is_admin: false });
        return;
      }
      this.json(res, 200, { id: who.id ?? 1, login: who.login, username: who.login, full_name: who.login, email: `${who.login}@example.com`, is_admin: who.isAdmin === true });
      return;
    }
    this.#notFound(res);
  }
}

import type { RepoName } from '../protocol/repo-name.js';
import { header, rateLimited, retryAfterSeconds, type ForgeHttpClient } from './client.js';
import type { ForgeAdapter, ForgeAnswer, Identity } from './types.js';

/**
 * forge_a: GitHub's REST API, `GET {api}/repos/{owner}/{repo}` (../shared/forges.md §1).
 */
export class GitHubAdapter implements ForgeAdapter {
  readonly #api: string;
  readonly #http: ForgeHttpClient;

  constructor(apiUrl: string, http: ForgeHttpClient) {
    this.#api = apiUrl;
    this.#http = http;
  }

  async lookup(token: string | null, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer> {
    const headers: Record<string, string> = {
      accept: 'application/vnd.github+json',
      'x-github-api-version': '2022-11-28',
    };
    if (token !== null) headers.authorization = `Bearer ${token}`;
    // Segments are already restricted to [A-Za-z0-9._-]; encoding is belt and braces.
    const url = `${this.#api}/repos/${encodeURIComponent(repo.org)}/${encodeURIComponent(repo.repo)}`;
    const res = await this.#http.get(url, headers, signal);

    // Spec forge rule 3: forge_a signals rate limiting with 403 (or 429); it is never a refusal.
    if (res.status === 429 || (res.status === 403 && isRateLimit(res))) throw rateLimited(retryAfterSeconds(res.headers));
    if (res.status === 401) return { kind: 'bad_token' };
    if (res.status === 404 || res.status === 403) return { kind: 'no_access' };
    if (res.status !== 200 || typeof res.body !== 'object' || res.body === null) {
      throw Object.assign(new Error(`forge answered ${res.status}`), { forgeStatus: res.status });
    }
    const body = res.body as { permissions?: Record<string, unknown>; private?: unknown };
    const p = body.permissions;
    if (token === null) {
      // Anonymous: the answer arriving means the repository is public (forge 404s private ones).
      return { kind: 'granted', permissions: { pull: body.private === false, push: false, admin: false } };
    }
    if (p === undefined || (p.admin !== true && p.push !== true && p.maintain !== true && p.pull !== true)) {
      // Spec rule 9: an installation token gets all flags false (or no key); the answer arriving at
      // all proves read access, and nothing more.
      return { kind: 'granted', permissions: { pull: true, push: false, admin: false } };
    }
    const admin = p.admin === true;
    const push = admin || p.push === true || p.maintain === true;
    return { kind: 'granted', permissions: { admin, push, pull: push || p.pull === true || p.triage === true } };
  }

  async identify(token: string, signal: AbortSignal): Promise<Identity | null> {
    const res = await this.#http.get(`${this.#api}/user`, { accept: 'application/vnd.github+json', 'x-github-api-version': '2022-11-28', authorization: `Bearer ${token}` }, signal);
    if (res.status === 429 || (res.status === 403 && isRateLimit(res))) throw rateLimited(retryAfterSeconds(res.headers));
    if (res.status !== 200) return null; // installation tokens cannot call /user (403 "Resource not accessible by integration")
    const body = res.body as { id?: unknown; login?: unknown; site_admin?: unknown };
    if (typeof body.login !== 'string') return null;
    return { id: String(body.id ?? body.login), name: body.login, siteAdmin: body.site_admin === true };
  }
}

function isRateLimit(res: { headers: Record<string, string | string[] | undefined>; body: unknown }): boolean {
  if (header(res.headers, 'x-ratelimit-remaining') === '0') return true;
  if (header(res.headers, 'retry-after') !== undefined) return true;
  const message = (res.body as { message?: unknown } | null)?.message;
  return typeof message === 'string' && /rate limit/i.test(message);
}

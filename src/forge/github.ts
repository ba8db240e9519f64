import type { RepoName } from '../protocol/repo-name.js';
import { rateLimited, retryAfterSeconds, type ForgeHttpClient, type ForgeResponse } from './client.js';
import { GITHUB_HEADERS, isGitHubRateLimit, type GitHubAppIdentity } from './github-app.js';
import { forgeFailure, READ_ONLY, UNKNOWN_TOKEN, type ForgeAdapter, type ForgeAnswer, type Identity } from './types.js';

/**
 * forge_a: GitHub's REST API (https://docs.github.com/en/rest/repos/repos#get-a-repository). User
 * tokens: admin → admin, push or maintain → push, pull or triage → pull. Installation tokens (an
 * app's, or GITHUB_TOKEN) carry no flags: GitHub 404s what a token cannot see, so read only.
 */
export class GitHubAdapter implements ForgeAdapter {
  readonly #api: string;
  readonly #http: ForgeHttpClient;
  readonly #app: GitHubAppIdentity | null;

  constructor(apiUrl: string, http: ForgeHttpClient, app: GitHubAppIdentity | null = null) {
    this.#api = apiUrl;
    this.#http = http;
    this.#app = app;
  }

  async lookup(token: string | null, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer> {
    // An authenticated client is always checked with its own token, never the app's.
    const asApp = token === null && this.#app !== null ? await this.#app.tokenFor(repo, signal) : null;
    const credential = token ?? asApp;
    const headers: Record<string, string> = { ...GITHUB_HEADERS };
    if (credential !== null) headers.authorization = `Bearer ${credential}`;
    const url = `${this.#api}/repos/${encodeURIComponent(repo.org)}/${encodeURIComponent(repo.repo)}`;
    const res = await this.#http.get(url, headers, signal);

    // forge_a signals rate limiting with 403 (or 429); it is never a refusal.
    if (isGitHubRateLimit(res)) throw rateLimited(retryAfterSeconds(res.headers));
    if (res.status === 401) {
      if (token !== null) return UNKNOWN_TOKEN;
      // An installation token revoked under us is our problem, not the caller's: forget it and ask plainly.
      if (asApp === null) return { kind: 'no_access' };
      this.#app?.forget(repo);
      return this.#plainAnonymous(repo, signal);
    }
    // 404 hides private repositories; other 403s are SSO or app-scope refusals; a 3xx is a renamed repository.
    if (res.status === 404 || res.status === 403 || (res.status >= 300 && res.status < 400)) return { kind: 'no_access' };
    if (res.status !== 200 || typeof res.body !== 'object' || res.body === null) throw forgeFailure(res.status);
    return token === null ? anonymousAnswer(res) : userAnswer(res);
  }

  async #plainAnonymous(repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer> {
    const res = await this.#http.get(`${this.#api}/repos/${encodeURIComponent(repo.org)}/${encodeURIComponent(repo.repo)}`, { ...GITHUB_HEADERS }, signal);
    if (isGitHubRateLimit(res)) throw rateLimited(retryAfterSeconds(res.headers));
    if (res.status === 200 && typeof res.body === 'object' && res.body !== null) return anonymousAnswer(res);
    if (res.status >= 500) throw forgeFailure(res.status);
    return { kind: 'no_access' };
  }

  async identify(token: string, signal: AbortSignal): Promise<Identity | null> {
    const res = await this.#http.get(`${this.#api}/user`, { ...GITHUB_HEADERS, authorization: `Bearer ${token}` }, signal);
    if (isGitHubRateLimit(res)) throw rateLimited(retryAfterSeconds(res.headers));
    if (res.status >= 500) throw forgeFailure(res.status);
    if (res.status !== 200) return null; // installation tokens cannot call /user (403 "Resource not accessible by integration")
    const body = res.body as { id?: unknown; login?: unknown; site_admin?: unknown };
    if (typeof body.login !== 'string') return null;
    return { id: String(body.id ?? body.login), name: body.login, siteAdmin: body.site_admin === true };
  }
}

/** Read only when the repository says it is public, never merely because an answer came. */
function anonymousAnswer(res: ForgeResponse): ForgeAnswer {
  const body = res.body as { private?: unknown; visibility?: unknown };
  const isPublic = body.private === false && (body.visibility === undefined || body.visibility === 'public');
  return isPublic ? { kind: 'granted', permissions: READ_ONLY } : { kind: 'no_access' };
}

function userAnswer(res: ForgeResponse): ForgeAnswer {
  const p = (res.body as { permissions?: Record<string, unknown> }).permissions;
  if (p === undefined || p === null || typeof p !== 'object' || (p.admin !== true && p.push !== true && p.maintain !== true && p.pull !== true && p.triage !== true)) {
    // The answer arriving proves read access, and nothing more.
    return { kind: 'granted', permissions: READ_ONLY };
  }
  const admin = p.admin === true;
  const push = admin || p.push === true || p.maintain === true;
  return { kind: 'granted', permissions: { admin, push, pull: true } };
}

import type { RepoName } from '../protocol/repo-name.js';
import { header, rateLimited, retryAfterSeconds, type ForgeHttpClient, type ForgeResponse } from './client.js';
import { forgeFailure, READ_ONLY, UNKNOWN_TOKEN, type ForgeAdapter, type ForgeAnswer, type Identity } from './types.js';

/**
 * forge_c and forge_d: Gitea and Forgejo, `GET {api}/repos/{owner}/{repo}` (https://docs.gitea.com/development/api-usage).
 * The token goes as `Authorization: token …`, lowercase (older versions match the scheme exactly).
 * `permissions` is computed from access to the code unit: all-false means "may see the repository
 * but not its code", so it is never read as read access. Neither forge rate-limits itself, a proxy
 * may: Retry-After means a rate limit, a 503 without it the instance is down.
 */
export class GiteaAdapter implements ForgeAdapter {
  readonly #api: string;
  readonly #http: ForgeHttpClient;

  constructor(apiUrl: string, http: ForgeHttpClient) {
    this.#api = apiUrl;
    this.#http = http;
  }

  async lookup(token: string | null, repo: RepoName, signal: AbortSignal): Promise<ForgeAnswer> {
    const url = `${this.#api}/repos/${encodeURIComponent(repo.org)}/${encodeURIComponent(repo.repo)}`;
    const res = await this.#http.get(url, token === null ? {} : { authorization: `token ${token}` }, signal);
    checkAvailability(res);
    if (res.status === 401) return token === null ? { kind: 'no_access' } : UNKNOWN_TOKEN;
    // 403: a scoped token without read:repository (unusable here), or REQUIRE_SIGNIN_VIEW for anonymous.
    if (res.status === 403) return token === null ? { kind: 'no_access' } : { kind: 'bad_token' };
    if (res.status === 404 || (res.status >= 300 && res.status < 400)) return { kind: 'no_access' };
    if (res.status !== 200 || typeof res.body !== 'object' || res.body === null) throw forgeFailure(res.status);
    const body = res.body as { private?: unknown; permissions?: { admin?: unknown; push?: unknown; pull?: unknown } | null };
    const p = body.permissions ?? {};
    if (token === null) {
      return body.private === false && p.pull !== false ? { kind: 'granted', permissions: READ_ONLY } : { kind: 'no_access' };
    }
    const admin = p.admin === true;
    const push = admin || p.push === true;
    const pull = push || p.pull === true;
    return pull ? { kind: 'granted', permissions: { admin, push, pull } } : { kind: 'no_access' };
  }

  async identify(token: string, signal: AbortSignal): Promise<Identity | null> {
    const res = await this.#http.get(`${this.#api}/user`, { authorization: `token ${token}` }, signal);
    checkAvailability(res);
    if (res.status !== 200) return null;
    const body = res.body as { id?: unknown; login?: unknown; is_admin?: unknown } | null;
    if (body === null || typeof body !== 'object' || typeof body.login !== 'string') return null;
    return { id: String(body.id ?? body.login), name: body.login, siteAdmin: body.is_admin === true };
  }
}

/** Retry-After means a rate limit whatever the status; 429 without Retry-After is still a rate limit (60 s); other 5xx are down. */
function checkAvailability(res: ForgeResponse): void {
  if (header(res.headers, 'retry-after') !== undefined || res.status === 429) throw rateLimited(retryAfterSeconds(res.headers));
  if (res.status >= 500) throw forgeFailure(res.status);
}

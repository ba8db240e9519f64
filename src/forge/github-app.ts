import { createPrivateKey, sign, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { RepoName } from '../protocol/repo-name.js';
import { rateLimited, retryAfterSeconds, type ForgeHttpClient, type ForgeResponse } from './client.js';

/** forge_a asks for these headers on every REST call (https://docs.github.com/en/rest/about-the-rest-api/api-versions). */
export const GITHUB_HEADERS = { accept: 'application/vnd.github+json', 'x-github-api-version': '2022-11-28' } as const;

/**
 * Refresh an installation token this long before its `expires_at` (the token is cached
 * per owner until shortly before it expires). A minute covers the one
 * repository lookup that may still be using it, with room for clock skew.
 */
export const TOKEN_REFRESH_MARGIN_MS = 60_000;

/** How long "the app is not installed on this owner" is remembered before asking again. */
export const NOT_INSTALLED_TTL_MS = 300_000;

/**
 * JWTs live nine minutes: GitHub refuses an `exp` more than ten minutes ahead
 * (https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app).
 */
const JWT_LIFETIME_S = 540;
/** GitHub recommends an `iat` 60 s in the past to absorb clock drift (same page). */
const JWT_BACKDATE_S = 60;

type OrgState =
  | { readonly kind: 'token'; readonly token: string; readonly refreshAt: number }
  | { readonly kind: 'not_installed'; readonly until: number };

function base64url(value: string | Buffer): string {
  return Buffer.from(value).toString('base64url');
}

/**
 * The optional GitHub App identity for anonymous lookups (docs/behaviour.md, "Anonymous read and app identity"). It signs
 * a short-lived RS256 JWT with the app's PEM key (node:crypto; no hand-rolled crypto), finds the
 * installation on a repository's owner, mints an installation token and caches it per owner until
 * shortly before it expires. `tokenFor` answers null when the app is not installed there, and the
 * caller then falls back to the plain anonymous lookup.
 */
export class GitHubAppIdentity {
  readonly #api: string;
  readonly #http: ForgeHttpClient;
  readonly #appId: string;
  readonly #key: KeyObject;
  readonly #orgs = new Map<string, OrgState>();
  readonly #minting = new Map<string, Promise<string | null>>();
  /** Bound on remembered owners; the oldest is forgotten first. */
  readonly #maxOrgs: number;
  /** The clock the cached tokens' lifetimes are read against; the JWT itself is signed on the real one. */
  readonly #now: () => number;

  constructor(apiUrl: string, http: ForgeHttpClient, appId: string, key: KeyObject, { maxOrgs = 10_000, now = Date.now }: { maxOrgs?: number; now?: () => number } = {}) {
    this.#api = apiUrl;
    this.#http = http;
    this.#appId = appId;
    this.#key = key;
    this.#maxOrgs = maxOrgs;
    this.#now = now;
  }

  /** Reads and parses the PEM key file; throws (a start-up refusal) when it is unreadable or not a private key. */
  static fromKeyFile(apiUrl: string, http: ForgeHttpClient, appId: string, keyFile: string): GitHubAppIdentity {
    return new GitHubAppIdentity(apiUrl, http, appId, createPrivateKey(readFileSync(keyFile)));
  }

  /** A fresh app JWT: RS256 over `{iat, exp, iss}`, GitHub's App JWT. */
  jwt(nowMs: number = Date.now()): string {
    const now = Math.floor(nowMs / 1000);
    const head = base64url(JSON.stringify({ alg: 'RS256', typ: 'JWT' }));
    const body = base64url(JSON.stringify({ iat: now - JWT_BACKDATE_S, exp: now + JWT_LIFETIME_S, iss: this.#appId }));
    // RS256 = RSASSA-PKCS1-v1_5 with SHA-256, node's default padding for an RSA key.
    const signature = sign('sha256', Buffer.from(`${head}.${body}`), this.#key);
    return `${head}.${body}.${base64url(signature)}`;
  }

  /**
   * An installation token that can look at `repo`'s owner, or null when the app is not installed
   * there. Concurrent callers for one owner share one mint.
   */
  async tokenFor(repo: RepoName, signal: AbortSignal): Promise<string | null> {
    const org = repo.org.toLowerCase();
    const state = this.#orgs.get(org);
    const now = this.#now();
    if (state?.kind === 'token' && state.refreshAt > now) return state.token;
    if (state?.kind === 'not_installed' && state.until > now) return null;
    const pending = this.#minting.get(org);
    if (pending !== undefined) return pending;
    const mint = this.#mint(org, repo, signal).finally(() => this.#minting.delete(org));
    this.#minting.set(org, mint);
    return mint;
  }

  /** Drops a cached installation token the forge no longer accepts (revoked, or the app uninstalled). */
  forget(repo: RepoName): void {
    this.#orgs.delete(repo.org.toLowerCase());
  }

  async #mint(org: string, repo: RepoName, signal: AbortSignal): Promise<string | null> {
    const auth = { ...GITHUB_HEADERS, authorization: `Bearer ${this.jwt()}` };
    // The repository's installation, which is its owner's (GitHub's "get a repository installation"): it works for
    // organizations and users alike, and answers 404 when the app is not installed there.
    const found = await this.#http.get(`${this.#api}/repos/${encodeURIComponent(repo.org)}/${encodeURIComponent(repo.repo)}/installation`, auth, signal);
    throwIfRateLimited(found);
    const id = (found.body as { id?: unknown } | null)?.id;
    if (found.status !== 200 || (typeof id !== 'number' && typeof id !== 'string')) {
      // 404: not installed (or this repository is outside a selected-repositories install). A
      // broken app (401 on the JWT) also falls back to the plain anonymous lookup rather than
      // refusing public reads.
      this.#set(org, { kind: 'not_installed', until: this.#now() + NOT_INSTALLED_TTL_MS });
      return null;
    }
    const minted = await this.#http.post(`${this.#api}/app/installations/${encodeURIComponent(String(id))}/access_tokens`, auth, {}, signal);
    throwIfRateLimited(minted);
    const body = minted.body as { token?: unknown; expires_at?: unknown } | null;
    if ((minted.status !== 201 && minted.status !== 200) || typeof body?.token !== 'string') {
      this.#set(org, { kind: 'not_installed', until: this.#now() + NOT_INSTALLED_TTL_MS });
      return null;
    }
    // Tokens live an hour; trust expires_at, and never assume the 40-char format (GitHub's
    // installation tokens may be longer since 2026: https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-an-installation-access-token-for-a-github-app).
    const expiresAt = typeof body.expires_at === 'string' ? Date.parse(body.expires_at) : NaN;
    const refreshAt = (Number.isNaN(expiresAt) ? this.#now() + 3600_000 : expiresAt) - TOKEN_REFRESH_MARGIN_MS;
    this.#set(org, { kind: 'token', token: body.token, refreshAt });
    return body.token;
  }

  #set(org: string, state: OrgState): void {
    this.#orgs.delete(org);
    this.#orgs.set(org, state);
    while (this.#orgs.size > this.#maxOrgs) this.#orgs.delete(this.#orgs.keys().next().value as string);
  }
}

/** forge_a's rate-limit signals (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api):
 * 429, or 403 with rate-limit headers or text; never a refusal. */
export function isGitHubRateLimit(res: ForgeResponse): boolean {
  if (res.status === 429) return true;
  if (res.status !== 403) return false;
  const h = res.headers;
  if (h['x-ratelimit-remaining'] === '0' || h['retry-after'] !== undefined) return true;
  const message = (res.body as { message?: unknown } | null)?.message;
  return typeof message === 'string' && /rate limit/i.test(message);
}

function throwIfRateLimited(res: ForgeResponse): void {
  if (isGitHubRateLimit(res)) throw rateLimited(retryAfterSeconds(res.headers));
}

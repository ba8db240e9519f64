import { createHash } from 'node:crypto';
import { createPublicKey, randomBytes, verify, type KeyObject } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { basicCredentials, EmulatorBase } from './base-emulator.js';
import { GiteaEmulator } from './gitea-emulator.js';
import { GitLabEmulator } from './gitlab-emulator.js';

export { GiteaEmulator, GitLabEmulator };

export { EmulatorBase, basicCredentials, type Outage, type SeenRequest } from './base-emulator.js';

/**
 * A forge on loopback that answers `GET /repos/{owner}/{repo}` the way GitHub's REST API does
 * (https://docs.github.com/en/rest/repos/repos#get-a-repository): `Bearer`/`token`/Basic-password tokens, 401 "Bad credentials" for an
 * unknown token, 404 for anything the caller cannot see (including anonymous on private), the
 * permissions object for users, all-false (or no key) for installation tokens, and rate limiting
 * as a 403/429 with x-ratelimit-remaining: 0 or a secondary 403/429 with retry-after. With `app`
 * set it also plays the GitHub App endpoints (https://docs.github.com/en/apps): RS256 JWTs checked against the app's public
 * key, installation lookups that 404 when not installed, and installation token minting.
 */
export interface EmulatedToken {
  readonly login: string;
  /** 'installation' tokens get all-false permissions (or none with omitPermissions). */
  readonly kind?: 'user' | 'installation';
  readonly omitPermissions?: boolean;
  readonly siteAdmin?: boolean;
  /** "org/repo" → role. */
  readonly repos: Readonly<Record<string, 'admin' | 'maintain' | 'push' | 'triage' | 'pull'>>;
}

export interface EmulatedRepo {
  readonly private: boolean;
}

export type RateLimitMode =
  | null
  | { kind: 'primary'; resetEpoch: number; status?: 403 | 429 }
  | { kind: 'secondary'; retryAfter: number; status: 403 | 429 }
  /** A secondary limit with neither header: the client must fall back to one minute. */
  | { kind: 'bare'; status: 403 | 429 };

/** The GitHub App this forge knows. */
export interface EmulatedApp {
  readonly appId: string;
  readonly clientId?: string;
  /** The app's public key (PEM or KeyObject), to check JWT signatures. */
  readonly publicKey: string | KeyObject;
  /** Seconds an installation token lives (GitHub: 3600). */
  tokenTtl?: number;
}

export interface EmulatedInstallation {
  readonly id: number;
  /** Selected repositories ("org/repo"); all of the account's when absent. */
  readonly repos?: readonly string[];
}

export class GitHubEmulator extends EmulatorBase {
  /** The id `/user` reports for a login: stable and distinct per login. */
  static idOf(login: string): number {
    return createHash('sha256').update(login).digest().readUInt32BE(0);
  }

  readonly tokens = new Map<string, EmulatedToken>();
  /** Logins whose `/user` answers 403 as for an app token (no person behind it). */
  readonly faceless = new Set<string>();
  readonly repos = new Map<string, EmulatedRepo>();
  /** Repository lookups received, by "org/repo". */
  readonly lookups: { repo: string; token: string | null; at: number }[] = [];
  rateLimit: RateLimitMode = null;
  app: EmulatedApp | null = null;
  /** Account login → installation of `app`. */
  readonly installations = new Map<string, EmulatedInstallation>();
  /** App endpoint calls (installation lookups and token mints), in order. */
  readonly appCalls: { path: string; at: number }[] = [];
  /** Installation tokens minted, in order. */
  readonly minted: { token: string; installation: number; expiresAt: number }[] = [];

  #token(req: IncomingMessage): string | null {
    const h = req.headers.authorization ?? '';
    const m = /^(bearer|token)\s+(.+)$/i.exec(h);
    if (m) return m[2]!.trim();
    const basic = basicCredentials(h);
    return basic === null ? null : basic[1];
  }

  #std(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    this.json(res, status, body, { 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '4999', 'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 3600), 'x-ratelimit-resource': 'core', ...headers });
  }

  protected handle(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (!req.headers['user-agent']) {
      this.#std(res, 403, { message: 'Request forbidden by administrative rules. Please make sure your request has a User-Agent header' });
      return;
    }
    const token = this.#token(req);
    const m = /^\/repos\/([^/]+)\/([^/]+)$/.exec(url.pathname);
    if (m && req.method === 'GET') this.lookups.push({ repo: `${m[1]}/${m[2]}`, token, at: Date.now() });
    if (this.rateLimit !== null) {
      const rl = this.rateLimit;
      if (rl.kind === 'primary') {
        this.#std(res, rl.status ?? 403, { message: 'API rate limit exceeded for 127.0.0.1. (But here\'s the good news: Authenticated requests get a higher rate limit. Check out the documentation for more details.)', documentation_url: 'https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting' }, { 'x-ratelimit-remaining': '0', 'x-ratelimit-used': '60', 'x-ratelimit-reset': String(rl.resetEpoch) });
      } else {
        const headers: Record<string, string> = rl.kind === 'secondary' ? { 'retry-after': String(rl.retryAfter) } : {};
        // Secondary limits carry no x-ratelimit-* of their own
        // (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
        res.writeHead(rl.status, { 'content-type': 'application/json; charset=utf-8', ...headers });
        res.end(JSON.stringify({ message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.', documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits' }));
      }
      return;
    }
    if (this.#appRoute(req, res, url)) return;
    const who = token === null ? null : this.tokens.get(token);
    if (token !== null && who === undefined) {
      this.#std(res, 401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest', status: '401' });
      return;
    }
    if (m && req.method === 'GET') {
      const key = `${m[1]}/${m[2]}`;
      const repo = this.repos.get(key);
      const role = who?.repos[key];
      const visible = repo !== undefined && (!repo.private || role !== undefined);
      if (!visible) {
        this.#std(res, 404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest/repos/repos#get-a-repository', status: '404' });
        return;
      }
      const body: Record<string, unknown> = { id: 1, name: m[2], full_name: key, owner: { login: m[1], type: 'Organization' }, private: repo.private, visibility: repo.private ? 'private' : 'public', default_branch: 'main' };
      if (who !== null && who !== undefined) {
        const rank = { pull: 1, triage: 2, push: 3, maintain: 4, admin: 5 }[role ?? 'pull'] ?? 0;
        const perms = who.kind === 'installation'
          ? { admin: false, maintain: false, push: false, triage: false, pull: false }
          : { admin: rank >= 5, maintain: rank >= 4, push: rank >= 3, triage: rank >= 2, pull: role !== undefined || !repo.private };
        if (!who.omitPermissions) body.permissions = perms;
      }
      this.#std(res, 200, body);
      return;
    }
    if (url.pathname === '/user' && req.method === 'GET' && who) {
      if (who.kind === 'installation' || this.faceless.has(who.login)) {
        this.#std(res, 403, { message: 'Resource not accessible by integration', documentation_url: 'https://docs.github.com/rest/users/users#get-the-authenticated-user', status: '403' });
        return;
      }
      // Like GitHub, each login has its own stable numeric id (lock ownership compares ids).
      this.#std(res, 200, { login: who.login, id: GitHubEmulator.idOf(who.login), type: 'User', site_admin: who.siteAdmin === true });
      return;
    }
    this.#std(res, 404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' });
  }

  /** The GitHub App endpoints; true when the request was one of them. */
  #appRoute(req: IncomingMessage, res: ServerResponse, url: URL): boolean {
    const repoInst = /^\/repos\/([^/]+)\/([^/]+)\/installation$/.exec(url.pathname);
    const accountInst = /^\/(?:orgs|users)\/([^/]+)\/installation$/.exec(url.pathname);
    const mint = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(url.pathname);
    if (!((repoInst || accountInst) && req.method === 'GET') && !(mint && req.method === 'POST')) return false;
    this.appCalls.push({ path: url.pathname, at: Date.now() });
    const problem = this.#checkJwt(req.headers.authorization ?? '');
    if (problem !== null) {
      this.#std(res, 401, { message: problem, documentation_url: 'https://docs.github.com/rest', status: '401' });
      return true;
    }
    const notFound = (): void => this.#std(res, 404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app', status: '404' });
    if (repoInst || accountInst) {
      const account = (repoInst ? repoInst[1] : accountInst![1])!;
      const inst = this.installations.get(account);
      const repoKey = repoInst ? `${repoInst[1]}/${repoInst[2]}` : null;
      // Not installed, or installed on selected repositories that exclude this one → 404 (GitHub's App docs).
      if (inst === undefined || (repoKey !== null && (inst.repos !== undefined ? !inst.repos.includes(repoKey) : !this.repos.has(repoKey)))) {
        notFound();
        return true;
      }
      this.#std(res, 200, { id: inst.id, account: { login: account, type: 'Organization' }, app_id: Number(this.app!.appId) || 1, repository_selection: inst.repos ? 'selected' : 'all', permissions: { metadata: 'read' } });
      return true;
    }
    const id = Number(mint![1]);
    const entry = [...this.installations.entries()].find(([, i]) => i.id === id);
    if (entry === undefined) {
      notFound();
      return true;
    }
    const [account, inst] = entry;
    // Since 2026 installation tokens may be longer than 40 characters (GitHub's App docs): mint a long one.
    const token = `ghs_${randomBytes(30).toString('base64url')}`;
    const expiresAt = Date.now() + (this.app!.tokenTtl ?? 3600) * 1000;
    const repos: Record<string, 'pull'> = {};
    for (const key of inst.repos ?? [...this.repos.keys()].filter((k) => k.startsWith(`${account}/`))) repos[key] = 'pull';
    this.tokens.set(token, { login: 'stowage[bot]', kind: 'installation', repos });
    this.minted.push({ token, installation: id, expiresAt });
    this.#std(res, 201, { token, expires_at: new Date(expiresAt).toISOString().replace(/\.\d{3}Z$/, 'Z'), permissions: { metadata: 'read' }, repository_selection: inst.repos ? 'selected' : 'all' });
    return true;
  }

  /** Null when the Authorization header holds a valid app JWT; else GitHub's complaint. */
  #checkJwt(authorization: string): string | null {
    const app = this.app;
    if (app === null) return 'A JSON web token could not be decoded';
    // JWTs go as Bearer only; the `token` scheme is refused for them (bearer-vs-token.md).
    const m = /^Bearer\s+([\w-]+)\.([\w-]+)\.([\w-]+)$/.exec(authorization);
    if (!m) return 'A JSON web token could not be decoded';
    let head: { alg?: unknown };
    let claims: { iat?: unknown; exp?: unknown; iss?: unknown };
    try {
      head = JSON.parse(Buffer.from(m[1]!, 'base64url').toString('utf8')) as typeof head;
      claims = JSON.parse(Buffer.from(m[2]!, 'base64url').toString('utf8')) as typeof claims;
    } catch {
      return 'A JSON web token could not be decoded';
    }
    if (head.alg !== 'RS256') return 'A JSON web token could not be decoded';
    const key = typeof app.publicKey === 'string' ? createPublicKey(app.publicKey) : app.publicKey;
    if (!verify('sha256', Buffer.from(`${m[1]}.${m[2]}`), key, Buffer.from(m[3]!, 'base64url'))) {
      return 'A JSON web token could not be decoded';
    }
    const now = Math.floor(Date.now() / 1000);
    if (typeof claims.exp !== 'number' || claims.exp <= now) return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires";
    if (claims.exp - now > 600) return "'Expiration time' claim ('exp') is too far in the future";
    if (typeof claims.iat !== 'number' || claims.iat > now + 60) return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued";
    if (claims.iss !== app.appId && claims.iss !== app.clientId && claims.iss !== Number(app.appId)) return "'Issuer' claim ('iss') must be an Integer";
    return null;
  }
}


/** The four providers of SVC_AUTH. */
export type ForgeKind = 'forge_a' | 'forge_b' | 'forge_c' | 'forge_d';

/** One of our three permission levels (or none), to be translated into each forge's terms. */
export type TableRole = 'admin' | 'push' | 'pull' | 'none';

/** One way a forge says "slow down", and the Retry-After this server should pass on. */
export interface RateLimitSignal {
  readonly name: string;
  apply(): void;
  readonly expectRetryAfter: number;
}

/**
 * One emulator in one of the four personalities, driven in our own terms so a test can run the
 * same rule against every forge: give a token a role on a repository, revoke it, count lookups,
 * and switch on each rate-limit signal that forge really sends.
 */
export class ForgePersonality {
  readonly kind: ForgeKind;
  readonly emulator: GitHubEmulator | GitLabEmulator | GiteaEmulator;

  constructor(kind: ForgeKind) {
    this.kind = kind;
    this.emulator = kind === 'forge_a' ? new GitHubEmulator() : kind === 'forge_b' ? new GitLabEmulator() : new GiteaEmulator(kind === 'forge_c' ? 'gitea' : 'forgejo');
  }

  start(): Promise<string> {
    return this.emulator.start();
  }

  stop(): Promise<void> {
    return this.emulator.stop();
  }

  /** The server environment that points SVC_AUTH at this emulator. */
  env(): Record<string, string> {
    const e = this.emulator;
    if (e instanceof GitHubEmulator) return { SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: e.url };
    if (e instanceof GitLabEmulator) return { SVC_AUTH: 'forge_b', SVC_FORGE_B_API_URL: e.apiUrl };
    return { SVC_AUTH: this.kind, SVC_FORGE_C_API_URL: e.apiUrl };
  }

  addRepo(key: string, isPublic: boolean): void {
    const e = this.emulator;
    if (e instanceof GitHubEmulator) e.repos.set(key, { private: !isPublic });
    else if (e instanceof GitLabEmulator) e.repos.set(key, { visibility: isPublic ? 'public' : 'private' });
    else e.repos.set(key, { private: !isPublic });
  }

  /** A user token with `role` on `key` ('none': a user of the forge without a role there). */
  grant(token: string, key: string, role: TableRole): void {
    const e = this.emulator;
    const login = `u-${token.slice(0, 12)}`;
    if (e instanceof GitHubEmulator) {
      e.tokens.set(token, { login, repos: role === 'none' ? {} : { [key]: role } });
    } else if (e instanceof GitLabEmulator) {
      e.tokens.set(token, { username: login, projects: { [key]: { admin: 40, push: 30, pull: 20, none: 10 }[role] } });
    } else {
      e.tokens.set(token, { login, scopes: ['read:repository', 'read:user'], repos: { [key]: ({ admin: 'admin', push: 'write', pull: 'read', none: 'none' } as const)[role] } });
    }
  }

  revoke(token: string): void {
    this.emulator.tokens.delete(token);
  }

  /** Repository lookups the forge received for `key` (any token). */
  lookupCount(key?: string): number {
    return this.emulator.lookups.filter((l) => key === undefined || l.repo === key).length;
  }

  setDelay(ms: number): void {
    this.emulator.delayMs = ms;
  }

  clearRateLimit(): void {
    const e = this.emulator;
    if (e instanceof GiteaEmulator) e.outage = null;
    else e.rateLimit = null;
  }

  /** Every rate-limit signal this forge sends (docs/behaviour.md, "How each forge's answer is read"). */
  rateLimitSignals(): RateLimitSignal[] {
    const e = this.emulator;
    const now = Math.floor(Date.now() / 1000);
    if (e instanceof GitHubEmulator) {
      return [
        { name: 'primary 403, x-ratelimit-reset', apply: () => { e.rateLimit = { kind: 'primary', resetEpoch: now + 240 }; }, expectRetryAfter: 240 },
        { name: 'primary 429, x-ratelimit-reset', apply: () => { e.rateLimit = { kind: 'primary', resetEpoch: now + 180, status: 429 }; }, expectRetryAfter: 180 },
        { name: 'secondary 403, retry-after', apply: () => { e.rateLimit = { kind: 'secondary', retryAfter: 33, status: 403 }; }, expectRetryAfter: 33 },
        { name: 'secondary 429, retry-after', apply: () => { e.rateLimit = { kind: 'secondary', retryAfter: 44, status: 429 }; }, expectRetryAfter: 44 },
        { name: 'secondary 429, no headers', apply: () => { e.rateLimit = { kind: 'bare', status: 429 }; }, expectRetryAfter: 60 },
      ];
    }
    if (e instanceof GitLabEmulator) {
      return [
        { name: '429 Retry later + Retry-After', apply: () => { e.rateLimit = { kind: 'rack', retryAfter: 25, resetEpoch: now + 200 }; }, expectRetryAfter: 25 },
        { name: '429 RateLimit-Reset only', apply: () => { e.rateLimit = { kind: 'rack-no-retry-after', resetEpoch: now + 200 }; }, expectRetryAfter: 200 },
        { name: '429 application limit, no headers', apply: () => { e.rateLimit = { kind: 'application' }; }, expectRetryAfter: 60 },
      ];
    }
    return [
      { name: 'proxy 429 + Retry-After', apply: () => { e.outage = { status: 429, retryAfter: 12 }; }, expectRetryAfter: 12 },
      { name: 'proxy 503 + Retry-After', apply: () => { e.outage = { status: 503, retryAfter: 13 }; }, expectRetryAfter: 13 },
      { name: 'proxy 403 + Retry-After', apply: () => { e.outage = { status: 403, retryAfter: 14 }; }, expectRetryAfter: 14 },
    ];
  }
}

/**
 * A GitHub emulator with one private repository, acme/game, and one token, `tok`, that may push to
 * it: what most server tests need. Stopped at the end of the test file.
 */
export async function pushableGame(t: { teardown(fn: () => unknown): void }): Promise<{ forge: GitHubEmulator; env: { SVC_FORGE_A_API_URL: string } }> {
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set('acme/game', { private: true });
  forge.tokens.set('tok', { login: 'w', repos: { 'acme/game': 'push' } });
  return { forge, env: { SVC_FORGE_A_API_URL: forge.url } };
}

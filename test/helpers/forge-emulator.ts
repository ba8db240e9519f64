import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A forge on loopback that answers `GET /repos/{owner}/{repo}` the way GitHub's REST API does
 * (../shared/forges.md §1): `Bearer`/`token`/Basic-password tokens, 401 "Bad credentials" for an
 * unknown token, 404 for anything the caller cannot see (including anonymous on private), the
 * permissions object for users, all-false (or no key) for installation tokens, and rate limiting
 * as a 403 with x-ratelimit-remaining: 0 or a secondary 429 with retry-after.
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

export type RateLimitMode = null | { kind: 'primary'; resetEpoch: number } | { kind: 'secondary'; retryAfter: number; status: 403 | 429 };

export class GitHubEmulator {
  readonly tokens = new Map<string, EmulatedToken>();
  readonly repos = new Map<string, EmulatedRepo>();
  /** Repository lookups received, by "org/repo". */
  readonly lookups: { repo: string; token: string | null; at: number }[] = [];
  rateLimit: RateLimitMode = null;
  /** Milliseconds to wait before answering (to test timeouts and in-flight sharing). */
  delayMs = 0;
  #server: Server | null = null;
  url = '';

  async start(): Promise<string> {
    this.#server = createServer((req, res) => {
      const run = (): void => this.#handle(req, res);
      if (this.delayMs > 0) setTimeout(run, this.delayMs);
      else run();
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.#server?.closeAllConnections();
    await new Promise<void>((resolve) => this.#server?.close(() => resolve()) ?? resolve());
  }

  #json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '4999', ...headers });
    res.end(JSON.stringify(body));
  }

  #token(req: IncomingMessage): string | null {
    const h = req.headers.authorization ?? '';
    const m = /^(bearer|token)\s+(.+)$/i.exec(h);
    if (m) return m[2]!.trim();
    const b = /^basic\s+(.+)$/i.exec(h);
    if (b) {
      const decoded = Buffer.from(b[1]!, 'base64').toString('utf8');
      return decoded.slice(decoded.indexOf(':') + 1);
    }
    return null;
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    if (!req.headers['user-agent']) {
      this.#json(res, 403, { message: 'Request forbidden by administrative rules. Please make sure your request has a User-Agent header' });
      return;
    }
    const token = this.#token(req);
    const m = /^\/repos\/([^/]+)\/([^/]+)$/.exec(url.pathname);
    if (m && req.method === 'GET') this.lookups.push({ repo: `${m[1]}/${m[2]}`, token, at: Date.now() });
    if (this.rateLimit !== null) {
      const rl = this.rateLimit;
      if (rl.kind === 'primary') {
        this.#json(res, 403, { message: 'API rate limit exceeded for 127.0.0.1.', documentation_url: 'https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting' }, { 'x-ratelimit-remaining': '0', 'x-ratelimit-used': '60', 'x-ratelimit-reset': String(rl.resetEpoch) });
      } else {
        this.#json(res, rl.status, { message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.', documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits' }, { 'retry-after': String(rl.retryAfter) });
      }
      return;
    }
    const who = token === null ? null : this.tokens.get(token);
    if (token !== null && who === undefined) {
      this.#json(res, 401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' });
      return;
    }
    if (m && req.method === 'GET') {
      const key = `${m[1]}/${m[2]}`;
      const repo = this.repos.get(key);
      const role = who?.repos[key];
      const visible = repo !== undefined && (!repo.private || role !== undefined || who?.kind === 'installation' && role !== undefined);
      if (!visible) {
        this.#json(res, 404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest/repos/repos#get-a-repository', status: '404' });
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
      this.#json(res, 200, body);
      return;
    }
    if (url.pathname === '/user' && req.method === 'GET' && who) {
      this.#json(res, 200, { login: who.login, id: 1, type: 'User', site_admin: who.siteAdmin === true });
      return;
    }
    this.#json(res, 404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' });
  }
}

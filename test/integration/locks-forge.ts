import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { GitHubEmulator } from '../helpers/forge-emulator.js';

/**
 * The GitHub emulator with a `/user` that answers as GitHub does for lock ownership tests: each login
 * has its own numeric `id` (the shared emulator answers `id: 1` for everyone, which would make every
 * lock "ours"), and installation tokens — or logins listed in `faceless` — get GitHub's 403
 * "Resource not accessible by integration". Every other request is passed to the emulator unchanged.
 * Drop this once the shared emulator gives logins distinct ids.
 */
export class LockForge {
  readonly emulator = new GitHubEmulator();
  /** Logins whose /user answers 403, as for an app token. */
  readonly faceless = new Set<string>();
  /** `/user` calls seen. */
  userLookups = 0;
  url = '';
  #server: Server | null = null;

  /** The id `/user` reports for a login (stable, distinct per login). */
  static idOf(login: string): number {
    return createHash('sha256').update(login).digest().readUInt32BE(0);
  }

  async start(): Promise<string> {
    const upstream = await this.emulator.start();
    this.#server = createServer((req, res) => {
      const send = (status: number, body: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-ratelimit-remaining': '4999' });
        res.end(JSON.stringify(body));
      };
      if (req.method === 'GET' && req.url === '/user') {
        this.userLookups++;
        const auth = req.headers.authorization ?? '';
        const token = /^(?:bearer|token)\s+(.+)$/i.exec(auth)?.[1]?.trim();
        const who = token === undefined ? undefined : this.emulator.tokens.get(token);
        if (who === undefined) return send(401, { message: 'Bad credentials' });
        if (who.kind === 'installation' || this.faceless.has(who.login)) return send(403, { message: 'Resource not accessible by integration' });
        return send(200, { login: who.login, id: LockForge.idOf(who.login), type: 'User', site_admin: who.siteAdmin === true });
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host' && k !== 'connection') headers[k] = v;
      request(`${upstream}${req.url}`, { method: 'GET', headers }).then(
        async (up) => {
          const body = Buffer.from(await up.body.arrayBuffer());
          const out: Record<string, string> = {};
          for (const [k, v] of Object.entries(up.headers)) if (typeof v === 'string' && !['connection', 'keep-alive', 'transfer-encoding', 'content-length'].includes(k)) out[k] = v;
          res.writeHead(up.statusCode, out);
          res.end(body);
        },
        (e: unknown) => {
          res.writeHead(502);
          res.end(String(e));
        },
      );
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.#server?.closeAllConnections();
    await new Promise<void>((resolve) => this.#server?.close(() => resolve()) ?? resolve());
    await this.emulator.stop();
  }
}

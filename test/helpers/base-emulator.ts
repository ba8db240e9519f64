import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * What every forge emulator shares: a real HTTP server on 127.0.0.1:0, an optional delay before
 * each answer (in-flight sharing, timeouts), an outage switch, and a log of the requests received.
 */
export type Outage = null | 'reset' | { status: number; retryAfter?: number; body?: string };

/** One request as the emulator saw it (no bodies). */
export interface SeenRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  readonly at: number;
}

export abstract class EmulatorBase {
  /** Milliseconds to wait before answering (to test timeouts and in-flight sharing). */
  delayMs = 0;
  /** When set, every request fails this way: the connection is reset, or a bare status comes back. */
  outage: Outage = null;
  /** Every request received, in order. */
  readonly requests: SeenRequest[] = [];
  url = '';
  #server: Server | null = null;

  async start(): Promise<string> {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const run = (): void => {
          const url = new URL(req.url ?? '/', 'http://x');
          this.requests.push({ method: req.method ?? 'GET', path: url.pathname, headers: req.headers, at: Date.now() });
          const outage = this.outage;
          if (outage === 'reset') {
            req.socket.destroy();
            return;
          }
          if (outage !== null) {
            const headers: Record<string, string> = { 'content-type': 'text/html' };
            if (outage.retryAfter !== undefined) headers['retry-after'] = String(outage.retryAfter);
            res.writeHead(outage.status, headers);
            res.end(outage.body ?? `<html><body><h1>${outage.status}</h1></body></html>`);
            return;
          }
          this.handle(req, res, url, Buffer.concat(chunks));
        };
        if (this.delayMs > 0) setTimeout(run, this.delayMs);
        else run();
      });
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.#server?.closeAllConnections();
    await new Promise<void>((resolve) => this.#server?.close(() => resolve()) ?? resolve());
  }

  protected json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers });
    res.end(JSON.stringify(body));
  }

  protected abstract handle(req: IncomingMessage, res: ServerResponse, url: URL, body: Buffer): void;
}

/** Decodes HTTP Basic into [user, password]; null when the header is not Basic. */
export function basicCredentials(header: string): [string, string] | null {
  const b = /^basic\s+(.+)$/i.exec(header);
  if (!b) return null;
  const decoded = Buffer.from(b[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? [decoded, ''] : [decoded.slice(0, colon), decoded.slice(colon + 1)];
}


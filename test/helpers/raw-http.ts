import { connect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

/** One HTTP/1.1 response read off a raw socket. */
export interface RawResponse {
  readonly status: number;
  /** Lowercased names; a repeated header keeps its last value. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
}

/** What came back on one connection. */
export interface RawResult {
  readonly responses: RawResponse[];
  /** True when the server closed the connection (or reset it) before we stopped reading. */
  readonly closed: boolean;
  /** Every byte received, responses or not. */
  readonly received: number;
}

export interface RawOptions {
  /** Stop (and destroy the socket) once this many complete responses arrived. Default 1. */
  readonly responses?: number;
  /** Send FIN after the request: uWS closes on FIN once it has handled what came before it. */
  readonly halfClose?: boolean;
  /** The request is HEAD: its response carries no body, whatever Content-Length says. */
  readonly head?: boolean;
  /** Speak TLS, trusting this certificate (nginx's self-signed one in front of the nodes). */
  readonly tls?: { readonly ca: string | Buffer };
}

/** Parses as many complete responses as `buf` holds. */
function parseResponses(buf: Buffer, head: boolean): RawResponse[] {
  const out: RawResponse[] = [];
  let at = 0;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n', at, 'latin1');
    if (end < 0) return out;
    const lines = buf.toString('latin1', at, end).split('\r\n');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!)?.[1] ?? NaN);
    const headers: Record<string, string> = {};
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = head ? 0 : Number(headers['content-length'] ?? 0);
    if (buf.length < end + 4 + length) return out;
    out.push({ status, headers, body: buf.subarray(end + 4, end + 4 + length) });
    at = end + 4 + length;
  }
}

/**
 * Sends raw bytes on a fresh connection to 127.0.0.1:`port` and reads what comes back, until the
 * wanted number of responses is complete or the server closes the connection: whichever event
 * comes first, never a clock. `data` is written at once (strings as latin1, byte for byte), or
 * `data(socket)` writes it at its own pace.
 */
export function rawRequest(port: number, data: string | Buffer | ((s: Socket) => Promise<void>), opts: RawOptions = {}): Promise<RawResult> {
  const want = opts.responses ?? 1;
  return new Promise((resolve, reject) => {
    const socket = opts.tls === undefined ? connect(port, '127.0.0.1') : tlsConnect({ port, host: '127.0.0.1', ca: opts.tls.ca });
    let buf = Buffer.alloc(0);
    let settled = false;
    const finish = (closed: boolean): void => {
      if (settled) return;
      settled = true;
      socket.destroy();
      resolve({ responses: parseResponses(buf, opts.head ?? false), closed, received: buf.length });
    };
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (parseResponses(buf, opts.head ?? false).length >= want) finish(false);
    });
    socket.on('close', () => finish(true));
    socket.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNRESET' || e.code === 'EPIPE') finish(true);
      else if (!settled) reject(e);
    });
    socket.once(opts.tls === undefined ? 'connect' : 'secureConnect', () => {
      const write = typeof data === 'function' ? data(socket) : new Promise<void>((r) => socket.write(typeof data === 'string' ? Buffer.from(data, 'latin1') : data, () => r()));
      write.then(
        () => {
          if (opts.halfClose && !settled) socket.end();
        },
        (e: unknown) => {
          if (!settled) reject(e);
        },
      );
    });
  });
}

/** A request head: request line, `Host`, the given header lines, the blank line; then `body`. */
export function rawHead(requestLine: string, headers: readonly string[] = [], body = ''): string {
  return `${requestLine}\r\nHost: 127.0.0.1\r\n${headers.map((h) => `${h}\r\n`).join('')}\r\n${body}`;
}

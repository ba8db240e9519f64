import { connect, type Socket } from 'node:net';

export interface KeepAliveResponse {
  readonly status: number;
  readonly body: Buffer;
}

/**
 * One keep-alive HTTP/1.1 connection that sends a request and reads its Content-Length response,
 * one at a time, with nothing else on top: the lean client of the small-object figures.
 *
 * Why it exists: on these 2 shared cores undici costs 0.13–0.27 ms of CPU per request (measured in
 * the bench's own CPU columns), as much as the server's whole handling of a 64 KiB upload, so a
 * small-object figure taken through it measures the client as much as the server. git-lfs's Go
 * client is not undici; this one costs next to nothing and leaves the server's figure visible. The
 * bench reports both.
 */
export class KeepAliveConnection {
  readonly #socket: Socket;
  readonly #host: string;
  #pending: { resolve: (r: KeepAliveResponse) => void; reject: (e: Error) => void } | null = null;
  #buffered: Buffer = Buffer.alloc(0);
  #closed: Error | null = null;

  private constructor(socket: Socket, host: string) {
    this.#socket = socket;
    this.#host = host;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    const fail = (e: Error): void => {
      this.#closed ??= e;
      const p = this.#pending;
      this.#pending = null;
      p?.reject(e);
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed by the server')));
  }

  static open(serverUrl: string): Promise<KeepAliveConnection> {
    const url = new URL(serverUrl);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname);
      socket.once('connect', () => resolve(new KeepAliveConnection(socket, url.host)));
      socket.once('error', reject);
    });
  }

  /** Sends one request (head and body in one write) and resolves with its response. */
  async request(method: string, path: string, headers: Record<string, string>, body: Buffer | null = null): Promise<KeepAliveResponse> {
    const { head, response } = this.#start(method, path, headers, `Content-Length: ${body?.length ?? 0}`);
    this.#socket.cork();
    this.#socket.write(head);
    if (body !== null && body.length > 0) this.#socket.write(body);
    this.#socket.uncork();
    return response;
  }

  /**
   * Sends one request whose body goes chunked (Transfer-Encoding: chunked), one HTTP chunk per
   * buffer, waiting for the socket to drain whenever its buffer is full; resolves with the response.
   */
  async requestChunked(method: string, path: string, headers: Record<string, string>, body: Iterable<Buffer>): Promise<KeepAliveResponse> {
    const { head, response } = this.#start(method, path, headers, 'Transfer-Encoding: chunked');
    // A refusal mid-body (the server answers early) must not count as unhandled while we still send.
    response.catch(() => undefined);
    const socket = this.#socket;
    socket.write(head);
    for (const chunk of body) {
      if (this.#closed !== null || this.#pending === null) break;
      if (chunk.length === 0) continue;
      socket.cork();
      socket.write(`${chunk.length.toString(16)}\r\n`);
      socket.write(chunk);
      const more = socket.write('\r\n');
      socket.uncork();
      if (!more) await drainOrClose(socket);
    }
    if (this.#closed === null && this.#pending !== null) socket.write('0\r\n\r\n');
    return response;
  }

  /** The request's head (with `framing`, its body-length header) and the promise of its response. */
  #start(method: string, path: string, headers: Record<string, string>, framing: string): { head: string; response: Promise<KeepAliveResponse> } {
    if (this.#closed !== null) throw this.#closed;
    if (this.#pending !== null) throw new Error('one request at a time');
    const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    const head = `${method} ${path} HTTP/1.1\r\nHost: ${this.#host}\r\n${lines}${framing}\r\n\r\n`;
    const response = new Promise<KeepAliveResponse>((resolve, reject) => {
      this.#pending = { resolve, reject };
    });
    return { head, response };
  }

  #onData(chunk: Buffer): void {
    this.#buffered = this.#buffered.length === 0 ? chunk : Buffer.concat([this.#buffered, chunk]);
    const end = this.#buffered.indexOf('\r\n\r\n');
    if (end < 0) return;
    const text = this.#buffered.subarray(0, end).toString('latin1');
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(text)?.[1];
    const p = this.#pending;
    if (length === undefined || Number.isNaN(status)) {
      this.#pending = null;
      this.#socket.destroy();
      p?.reject(new Error(`unexpected response: ${text.split('\r\n')[0]} (no Content-Length)`));
      return;
    }
    const total = end + 4 + Number(length);
    if (this.#buffered.length < total) return;
    const body = this.#buffered.subarray(end + 4, total);
    this.#buffered = this.#buffered.subarray(total);
    this.#pending = null;
    p?.resolve({ status, body });
  }

  close(): void {
    this.#socket.destroy();
  }
}

/** Resolves when the socket can take more, or is gone (the response promise then reports why). */
function drainOrClose(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
}

import { connect } from 'node:net';
import { Agent, request } from 'undici';
import type { KeepAliveConnection } from './keepalive-client.js';

const LFS_JSON = 'application/vnd.git-lfs+json';
const MiB_ = 1 << 20;

/** One action of a batch answer (batch.md): where to send and which headers to send with it. */
export interface LfsAction {
  readonly href: string;
  readonly header?: Record<string, string>;
}

/** One object of a batch answer: its actions, or its error. */
export interface BatchObject {
  readonly oid: string;
  readonly size: number;
  readonly actions?: { upload?: LfsAction; download?: LfsAction; verify?: LfsAction };
  readonly error?: { code: number; message: string };
}

/**
 * The part of a Git LFS client the benchmarks need, over undici: batch, PUT with the action's headers,
 * verify, GET into a null sink. It talks like git-lfs 3.3.0 (Basic credentials, LFS media types).
 */
export class LfsClient {
  readonly #base: string;
  readonly #auth: string;
  readonly dispatcher: Agent;

  constructor(serverUrl: string, repo: string, token: string, connections = 8) {
    this.#base = `${serverUrl}/${repo}`;
    this.#auth = `Basic ${Buffer.from(`bench:${token}`).toString('base64')}`;
    this.dispatcher = new Agent({ connections, pipelining: 1, bodyTimeout: 0, headersTimeout: 0 });
  }

  /**
   * A batch is sent once more when the server closed the keep-alive connection it went out on: the
   * bench generates and hashes a GiB of data synchronously between requests, and a connection idle
   * past the server's idle timeout (8–12 s) meanwhile is closed before undici's own keep-alive
   * timer, which runs on this blocked event loop, could retire it. A batch changes nothing on the
   * server, so it is safe to repeat; each retry is written to stderr, so a server that closes
   * connections still shows.
   */
  async batch(operation: 'upload' | 'download', objects: { oid: string; size: number }[]): Promise<BatchObject[]> {
    try {
      return await this.#batch(operation, objects);
    } catch (e) {
      if (((e as Error).cause as { code?: string } | undefined)?.code !== 'UND_ERR_SOCKET') throw e;
      process.stderr.write(`batch ${operation} sent again: ${(e as Error).message}\n`);
      return this.#batch(operation, objects);
    }
  }

  async #batch(operation: 'upload' | 'download', objects: { oid: string; size: number }[]): Promise<BatchObject[]> {
    const res = await request(`${this.#base}/objects/batch`, {
      method: 'POST',
      dispatcher: this.dispatcher,
      headers: { authorization: this.#auth, accept: LFS_JSON, 'content-type': LFS_JSON },
      body: JSON.stringify({ operation, transfers: ['basic'], objects, hash_algo: 'sha256' }),
    }).catch((e: unknown) => {
      throw new Error(`batch ${operation} of ${objects.length}: ${(e as Error).message}`, { cause: e });
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`batch ${operation}: ${res.statusCode} ${text}`);
    const parsed = JSON.parse(text) as { objects: BatchObject[] };
    for (const o of parsed.objects) if (o.error) throw new Error(`batch ${operation} ${o.oid}: ${o.error.code} ${o.error.message}`);
    return parsed.objects;
  }

  /**
   * PUTs a body with exactly the headers the upload action gives. undici refuses to be handed a
   * Transfer-Encoding header; it sends chunked by itself for a streamed body without Content-Length,
   * which is what `Transfer-Encoding: chunked` in the action asks for.
   */
  async put(action: LfsAction, body: Buffer | AsyncIterable<Buffer> | Iterable<Buffer>, size: number): Promise<void> {
    const headers: Record<string, string> = { authorization: this.#auth, 'content-type': 'application/octet-stream' };
    let chunked = false;
    for (const [k, v] of Object.entries(action.header ?? {})) {
      if (k.toLowerCase() === 'transfer-encoding') chunked = /chunked/i.test(v);
      else headers[k.toLowerCase()] = v;
    }
    if (!chunked) headers['content-length'] = String(size);
    const res = await request(action.href, { method: 'PUT', dispatcher: this.dispatcher, headers, body: body as never }).catch((e: unknown) => {
      throw new Error(`PUT ${action.href} (${size} bytes${chunked ? ', chunked' : ''}): ${(e as Error).message}`, { cause: e });
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`PUT ${action.href}: ${res.statusCode} ${text}`);
  }

  async verify(action: LfsAction, oid: string, size: number): Promise<void> {
    const res = await request(action.href, {
      method: 'POST',
      dispatcher: this.dispatcher,
      headers: { authorization: this.#auth, accept: LFS_JSON, 'content-type': LFS_JSON, ...(action.header ?? {}) },
      body: JSON.stringify({ oid, size }),
    }).catch((e: unknown) => {
      throw new Error(`verify ${oid}: ${(e as Error).message}`, { cause: e });
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`verify ${oid}: ${res.statusCode} ${text}`);
  }

  /** batch → PUT → verify, as git-lfs does for one object; skips the PUT if the server has it. */
  async upload(oid: string, size: number, body: () => Buffer | AsyncIterable<Buffer> | Iterable<Buffer>): Promise<void> {
    const [entry] = await this.batch('upload', [{ oid, size }]);
    await this.transfer(entry!, body);
  }

  /** The transfer half of an upload, for an entry of a batch answer already in hand. */
  async transfer(entry: BatchObject, body: () => Buffer | AsyncIterable<Buffer> | Iterable<Buffer>): Promise<void> {
    const up = entry.actions?.upload;
    if (up === undefined) return;
    await this.put(up, body(), entry.size);
    if (entry.actions?.verify) await this.verify(entry.actions.verify, entry.oid, entry.size);
  }

  /**
   * transfer() over a lean keep-alive connection instead of undici (see KeepAliveConnection): the
   * same PUT with the action's headers (Content-Length, one write), then verify if the batch asked.
   */
  async transferOver(conn: KeepAliveConnection, entry: BatchObject, data: Buffer): Promise<void> {
    const up = entry.actions?.upload;
    if (up === undefined) return;
    const put = await conn.request('PUT', new URL(up.href).pathname, this.#leanPutHeaders(up), data);
    if (put.status !== 200) throw new Error(`PUT ${up.href}: ${put.status} ${put.body.toString()}`);
    await this.verifyOver(conn, entry);
  }

  /** put() of a large body over a lean keep-alive connection, chunked (as the action asks for it). */
  async putChunkedOver(conn: KeepAliveConnection, action: LfsAction, body: Iterable<Buffer>): Promise<void> {
    const put = await conn.requestChunked('PUT', new URL(action.href).pathname, this.#leanPutHeaders(action), body);
    if (put.status !== 200) throw new Error(`PUT ${action.href}: ${put.status} ${put.body.toString()}`);
  }

  /** The upload action's headers with our credentials; the connection adds the framing header itself. */
  #leanPutHeaders(up: LfsAction): Record<string, string> {
    const headers: Record<string, string> = { authorization: this.#auth, 'content-type': 'application/octet-stream' };
    for (const [k, v] of Object.entries(up.header ?? {})) if (k.toLowerCase() !== 'transfer-encoding') headers[k.toLowerCase()] = v;
    return headers;
  }

  /** verify() over a lean keep-alive connection, if the batch asked for it. */
  async verifyOver(conn: KeepAliveConnection, entry: BatchObject): Promise<void> {
    const verify = entry.actions?.verify;
    if (verify === undefined) return;
    const body = Buffer.from(JSON.stringify({ oid: entry.oid, size: entry.size }));
    const vh: Record<string, string> = { authorization: this.#auth, accept: LFS_JSON, 'content-type': LFS_JSON };
    for (const [k, v] of Object.entries(verify.header ?? {})) vh[k.toLowerCase()] = v;
    const res = await conn.request('POST', new URL(verify.href).pathname, vh, body);
    if (res.status !== 200) throw new Error(`verify ${entry.oid}: ${res.status} ${res.body.toString()}`);
  }

  /**
   * GETs an object (or a Range of it) and discards the bytes; returns how many arrived. `throttle`
   * (bytes per second) makes a slow reader whose socket buffers fill, to test server backpressure;
   * `limit` stops reading after that many bytes and closes the connection.
   */
  async download(href: string, opts: { range?: string; throttle?: number; limit?: number } = {}): Promise<number> {
    const headers: Record<string, string> = { authorization: this.#auth };
    if (opts.range) headers.range = opts.range;
    const controller = new AbortController();
    const res = await request(href, { method: 'GET', dispatcher: this.dispatcher, headers, signal: controller.signal }).catch((e: unknown) => {
      throw new Error(`GET ${href}: ${(e as Error).message}`, { cause: e });
    });
    if (res.statusCode !== 200 && res.statusCode !== 206) throw new Error(`GET ${href}: ${res.statusCode} ${await res.body.text()}`);
    // 'data' events, not for-await: measured 20-60% faster in undici 7 on loopback, and the sink
    // must not be what limits a download figure.
    const body = res.body;
    const started = performance.now();
    let got = 0;
    await new Promise<void>((resolve, reject) => {
      body.on('data', (chunk: Buffer) => {
        got += chunk.length;
        if (opts.limit !== undefined && got >= opts.limit) {
          controller.abort();
          resolve();
          return;
        }
        if (opts.throttle !== undefined) {
          const wait = started + (got / opts.throttle) * 1000 - performance.now();
          if (wait > 1) {
            body.pause();
            setTimeout(() => body.resume(), wait);
          }
        }
      });
      body.once('end', resolve);
      body.once('error', (e) => (controller.signal.aborted ? resolve() : reject(new Error(`GET ${href} after ${got} bytes: ${e.message}`, { cause: e }))));
    });
    return got;
  }

  /** GET into a bare socket (see rawGet): the server's sending rate without undici's parsing cost. */
  downloadRaw(href: string): Promise<number> {
    return rawGet(href, { Authorization: this.#auth });
  }

  close(): Promise<void> {
    return this.dispatcher.close();
  }
}

/**
 * GET into a bare TCP socket that only counts bytes, and resolve with the body's length. No HTTP
 * client parses the body, so the figure is the sender's rate rather than undici's receive rate (which
 * on 2 shared cores measured well below what the server sends). One request per connection.
 */
export function rawGet(href: string, headers: Record<string, string> = {}): Promise<number> {
  const url = new URL(href);
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  return new Promise<number>((resolve, reject) => {
    let head: Buffer | null = Buffer.alloc(0);
    let expected = -1;
    let got = 0;
    let done = false;
    const finish = (err: Error | null): void => {
      if (done) return;
      done = true;
      socket.destroy();
      if (err) reject(err);
      else resolve(got);
    };
    // onread into one reused 1 MiB buffer: no allocation per read, the cheapest receive node offers.
    const socket = connect({
      port: Number(url.port),
      host: url.hostname,
      onread: {
        buffer: Buffer.allocUnsafe(MiB_),
        callback: (n: number, buf: Uint8Array): boolean => {
          if (head !== null) {
            head = Buffer.concat([head, buf.subarray(0, n)]);
            const end = head.indexOf('\r\n\r\n');
            if (end < 0) return true;
            const text = head.subarray(0, end).toString('latin1');
            const status = Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1]);
            expected = Number(/\r\ncontent-length:\s*(\d+)/i.exec(text)?.[1] ?? -1);
            if (status !== 200 || expected < 0) {
              finish(new Error(`raw GET ${href}: ${text.split('\r\n')[0]}`));
              return false;
            }
            got = head.length - end - 4;
            head = null;
          } else {
            got += n;
          }
          if (got >= expected) finish(null);
          return true;
        },
      },
    });
    socket.once('connect', () => {
      socket.write(`GET ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\n${extra}Connection: close\r\n\r\n`);
    });
    socket.once('error', (e) => finish(e));
    socket.once('close', () => finish(new Error(`raw GET ${href}: connection closed after ${got} bytes`)));
  });
}

import { Readable } from 'node:stream';
import { Agent, request, type Dispatcher } from 'undici';
import { lfsError } from '../errors/errors.js';
import { LFS_JSON } from '../protocol/media-types.js';
import type { RepoName } from '../protocol/repo-name.js';

/** An action as the upstream's batch answer gives it: where to send the bytes, with what headers. */
export interface UpstreamAction {
  readonly href: string;
  readonly header: Readonly<Record<string, string>>;
}

/** An upstream answer relayed as it came: status, JSON body (capped) and the challenge headers. */
export interface UpstreamAnswer {
  readonly status: number;
  readonly body: unknown;
  readonly headers: Readonly<Record<string, string>>;
}

/** What the client's request carries that the upstream needs: only these of its headers are sent on. */
export interface ClientCredentials {
  /** The client's own Authorization header, '' when it sent none. */
  readonly authorization: string;
}

/** Largest JSON answer read from the upstream (a batch of 1000 objects with long presigned links). */
const MAX_JSON_BYTES = 8 << 20;
/** No answer head, or no body byte, for this long: the upstream is taken as gone (git-lfs waits 30 s). */
const DEADLINE_MS = 20_000;
/** Headers of a refusal the client needs to ask for credentials again. */
const CHALLENGE_HEADERS = ['lfs-authenticate', 'www-authenticate', 'retry-after'];

/**
 * The cache's one way to the upstream LFS server (docs/cache.md): JSON API calls relayed with the
 * client's Authorization and nothing else of its headers, and the upstream's transfer actions
 * (download, upload, verify), whose links and headers may carry the upstream's own credentials.
 * Every call has a deadline for the head and between body bytes.
 */
export class UpstreamClient {
  readonly #template: string;
  readonly #agent: Agent;

  constructor(template: string) {
    this.#template = template;
    this.#agent = new Agent({ headersTimeout: DEADLINE_MS, bodyTimeout: DEADLINE_MS, keepAliveTimeout: 4000, connections: 64 });
  }

  /** The upstream's LFS endpoint of `repo` (no trailing slash). */
  endpoint(repo: RepoName): string {
    return this.#template.replaceAll('{org}', encodeURIComponent(repo.org)).replaceAll('{repo}', encodeURIComponent(repo.repo));
  }

  /**
   * A JSON API call (batch, locks) to `path` under the repository's endpoint; the answer whatever
   * its status. 502 when the upstream cannot be reached or answers what is not JSON.
   */
  async json(method: 'GET' | 'POST', repo: RepoName, path: string, client: ClientCredentials, body: unknown, signal?: AbortSignal): Promise<UpstreamAnswer> {
    const headers: Record<string, string> = { Accept: LFS_JSON };
    if (client.authorization !== '') headers.Authorization = client.authorization;
    if (body !== undefined) headers['Content-Type'] = LFS_JSON;
    let answer: Dispatcher.ResponseData;
    try {
      answer = await request(`${this.endpoint(repo)}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        dispatcher: this.#agent,
        signal,
      });
    } catch (e) {
      throw upstreamUnreachable(e);
    }
    const text = await readCapped(answer.body, MAX_JSON_BYTES);
    const relayed: Record<string, string> = {};
    for (const name of CHALLENGE_HEADERS) {
      const v = answer.headers[name];
      if (typeof v === 'string') relayed[name] = v;
    }
    let parsed: unknown;
    try {
      parsed = text === '' ? {} : JSON.parse(text);
    } catch {
      throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream answered ${answer.statusCode} with a body that is not JSON`);
    }
    return { status: answer.statusCode, body: parsed, headers: relayed };
  }

  /** GET of the upstream's download action: the response, its status checked (200 only). */
  async download(action: UpstreamAction, signal?: AbortSignal): Promise<Dispatcher.ResponseData> {
    let answer: Dispatcher.ResponseData;
    try {
      answer = await request(action.href, { method: 'GET', headers: { ...action.header }, dispatcher: this.#agent, signal });
    } catch (e) {
      throw upstreamUnreachable(e);
    }
    if (answer.statusCode !== 200) {
      await answer.body.dump().catch(() => undefined);
      throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream's download answered ${answer.statusCode}`);
    }
    return answer;
  }

  /**
   * PUT of `size` bytes to the upstream's upload action from `body` (read as it is sent, so memory
   * stays bounded); resolves once the upstream acknowledged them with a 2xx.
   */
  async upload(action: UpstreamAction, size: number, body: AsyncIterable<Uint8Array>, signal?: AbortSignal): Promise<void> {
    const headers: Record<string, string> = { 'Content-Type': 'application/octet-stream', ...action.header };
    // The action may ask for chunked framing (objects past a Content-Length the upstream takes).
    const chunked = Object.entries(headers).some(([k, v]) => k.toLowerCase() === 'transfer-encoding' && v.toLowerCase() === 'chunked');
    for (const k of Object.keys(headers)) if (k.toLowerCase() === 'transfer-encoding') delete headers[k];
    if (!chunked) headers['Content-Length'] = String(size);
    let answer: Dispatcher.ResponseData;
    try {
      answer = await request(action.href, { method: 'PUT', headers, body: Readable.from(body, { objectMode: false }), dispatcher: this.#agent, signal });
    } catch (e) {
      throw upstreamUnreachable(e);
    }
    await answer.body.dump();
    if (answer.statusCode < 200 || answer.statusCode > 299) throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream's upload answered ${answer.statusCode}`);
  }

  /** POST of the verify action (batch.md): resolves once the upstream confirmed it holds the object. */
  async verify(action: UpstreamAction, oid: string, size: number, signal?: AbortSignal): Promise<void> {
    let answer: Dispatcher.ResponseData;
    try {
      answer = await request(action.href, {
        method: 'POST',
        headers: { Accept: LFS_JSON, 'Content-Type': LFS_JSON, ...action.header },
        body: JSON.stringify({ oid, size }),
        dispatcher: this.#agent,
        signal,
      });
    } catch (e) {
      throw upstreamUnreachable(e);
    }
    await answer.body.dump();
    if (answer.statusCode !== 200) throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream's verify answered ${answer.statusCode}`);
  }

  close(): Promise<void> {
    return this.#agent.close();
  }
}

function upstreamUnreachable(e: unknown): Error {
  // The message names the failure, never the link (a presigned link carries credentials).
  const code = (e as { code?: unknown })?.code;
  return lfsError('LFS_ERR_UPSTREAM_UNREACHABLE', `The upstream LFS server could not be reached (${typeof code === 'string' ? code : (e as Error)?.name ?? 'error'})`);
}

async function readCapped(body: Dispatcher.ResponseData['body'], cap: number): Promise<string> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const chunk of body) {
    n += (chunk as Buffer).byteLength;
    if (n > cap) {
      body.on('error', () => undefined);
      body.destroy();
      throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream's answer is larger than ${cap} bytes`);
    }
    parts.push(chunk as Buffer);
  }
  return Buffer.concat(parts).toString('utf8');
}

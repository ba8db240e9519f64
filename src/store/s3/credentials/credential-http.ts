import { request } from 'undici';
import { readCappedText } from '../../../util/read-capped.js';
import { CredentialsError } from './aws-credentials.js';

/** Credential answers are a few KiB; anything larger is not one. */
const MAX_ANSWER = 64 << 10;

export interface CredentialRequest {
  readonly method: 'GET' | 'PUT' | 'POST';
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
  /** Whole request, connect to last byte. */
  readonly timeoutMs: number;
  readonly signal: AbortSignal;
}

/** One request to a credential endpoint (no keep-alive: calls come hours apart); errors never name a header, which carries tokens. */
export async function fetchCredentialText(source: string, url: string, init: CredentialRequest): Promise<{ status: number; text: string }> {
  try {
    const res = await request(url, {
      method: init.method,
      headers: init.headers,
      body: init.body,
      reset: true,
      signal: AbortSignal.any([init.signal, AbortSignal.timeout(init.timeoutMs)]),
    });
    const text = await readCappedText(res.body, MAX_ANSWER, () => new CredentialsError(`${source}: answer larger than ${MAX_ANSWER} bytes`));
    return { status: res.statusCode, text };
  } catch (e) {
    if (e instanceof CredentialsError) throw e;
    const err = e as { code?: string; name?: string; message?: string };
    const why = err.name === 'TimeoutError' ? `no answer within ${init.timeoutMs} ms` : (err.code ?? err.name ?? 'error');
    throw new CredentialsError(`${source}: ${why} (${new URL(url).origin})`, { cause: e });
  }
}

export function parseJsonAnswer(source: string, text: string): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // falls through
  }
  throw new CredentialsError(`${source}: the answer is not a JSON object`);
}

import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** A failure with the exit status it maps to (docs/cli.md lists them). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

/** Exit statuses (docs/cli.md): the README's convention, which matches git-lfs's 2 for refusals. */
export const EXIT = { ok: 0, problems: 1, usage: 2, failed: 3, interrupted: 130 } as const;

/** Where a repository lives: the server's base URL and `org/repo`. */
export interface Target {
  readonly base: string;
  readonly repo: string;
}

/** The `repo` of a target for server-wide commands: their routes are /-/objects/… (rewrap and its job). */
export const SERVER_WIDE = '-';

/** `org/repo` as the server's routes accept it. */
export const REPO_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]*\/[A-Za-z0-9_][A-Za-z0-9._-]*$/;

/** The clone's LFS endpoint (`git lfs env` in `cwd`), split into server base URL and org/repo. */
export async function lfsEndpoint(cwd: string): Promise<Target | null> {
  const { stdout } = await exec('git', ['lfs', 'env'], { cwd, maxBuffer: 16 << 20 }).catch(() => ({ stdout: '' }));
  const m = /^Endpoint=(\S+)/m.exec(stdout);
  if (!m) return null;
  const u = new URL(m[1]!);
  const parts = u.pathname.replace(/\/+$/, '').split('/').filter(Boolean);
  if (parts.length < 2) return null;
  const repo = parts.slice(-2).join('/').replace(/\.git$/, '');
  u.pathname = parts.slice(0, -2).join('/');
  return { base: `${u.origin}${u.pathname === '/' ? '' : u.pathname}`, repo };
}

/**
 * A token from `git credential fill`, as git-lfs asks it, run in `cwd` so the clone's configuration
 * applies. No prompt (GIT_TERMINAL_PROMPT=0), so CI never hangs; null when git has none.
 */
export async function credentialFill(target: Target, cwd: string, env: NodeJS.ProcessEnv, interactive: boolean): Promise<string | null> {
  const u = new URL(`${target.base}/${target.repo}`);
  const input = `protocol=${u.protocol.replace(/:$/, '')}\nhost=${u.host}\npath=${u.pathname.replace(/^\/+/, '')}\n\n`;
  const out = await new Promise<string | null>((resolve) => {
    const child = spawn('git', ['credential', 'fill'], {
      cwd,
      env: interactive ? env : { ...env, GIT_TERMINAL_PROMPT: '0', GIT_ASKPASS: '', SSH_ASKPASS: '' },
      stdio: ['pipe', 'pipe', interactive ? 'inherit' : 'ignore'],
    });
    let text = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (text += c));
    child.on('error', () => resolve(null));
    child.on('close', (code) => resolve(code === 0 ? text : null));
    child.stdin.end(input);
  });
  const password = out === null ? null : /^password=(.*)$/m.exec(out)?.[1];
  return password === undefined || password === null || password === '' ? null : password;
}

export interface Answer {
  readonly status: number;
  readonly json: any;
}

/** Talks to the server for one repository with one token (sent as git-lfs does, Basic). */
export class Client {
  readonly target: Target;
  readonly #token: string | null;

  constructor(target: Target, token: string | null) {
    this.target = target;
    this.#token = token;
  }

  /** `path` relative to the repository (`objects/audit`); 4xx are refusals (exit 2), 5xx and no answer failures (exit 3). */
  async call(method: string, path: string, body?: unknown): Promise<Answer> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.#token !== null) headers.authorization = `Basic ${Buffer.from(`stowage:${this.#token}`).toString('base64')}`;
    // The server refuses a state-changing call without a JSON type, an empty body included (a
    // cross-site form could send one otherwise).
    if (method !== 'GET' && method !== 'HEAD') headers['content-type'] = 'application/json';
    const url = `${this.target.base}/${this.target.repo}/${path}`;
    let res: Response;
    try {
      res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new CliError(`cannot reach ${this.target.base}: ${(e as Error & { cause?: Error }).cause?.message ?? (e as Error).message}`, EXIT.failed);
    }
    const text = await res.text();
    let json: any = null;
    try {
      json = text === '' ? null : JSON.parse(text);
    } catch {
      json = { message: text.slice(0, 200) };
    }
    if (res.status >= 400) {
      const hint = res.status === 401 ? ' (set STOWAGE_TOKEN, or store a token in git\'s credential helper for this server)' : '';
      const why = `${res.status} ${json?.message ?? ''}`.trim();
      throw new CliError(`${method} /${this.target.repo}/${path}: ${why}${hint}`, res.status < 500 ? EXIT.usage : EXIT.failed);
    }
    return { status: res.status, json };
  }

  /** GET of a transfer link the server handed out, with this client's credentials; the body is read and dropped. Returns its length. */
  async download(href: string): Promise<number> {
    const headers: Record<string, string> = {};
    if (this.#token !== null) headers.authorization = `Basic ${Buffer.from(`stowage:${this.#token}`).toString('base64')}`;
    let res: Response;
    try {
      res = await fetch(href, { headers });
    } catch (e) {
      throw new CliError(`cannot reach ${new URL(href).origin}: ${(e as Error & { cause?: Error }).cause?.message ?? (e as Error).message}`, EXIT.failed);
    }
    if (res.status !== 200 || res.body === null) {
      await res.body?.cancel();
      throw new CliError(`GET of an object link: ${res.status}`, res.status < 500 ? EXIT.usage : EXIT.failed);
    }
    let n = 0;
    for await (const chunk of res.body) n += (chunk as Uint8Array).byteLength;
    return n;
  }
}

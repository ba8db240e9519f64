import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface GitResult {
  readonly stdout: string;
  readonly stderr: string;
}

export interface GitRun extends GitResult {
  readonly code: number;
}

/** The environment of a sandboxed git: its own HOME, no system config, no prompts, a fixed author. */
export function sandboxEnv(home: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    HOME: home,
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_TERMINAL_PROMPT: '0',
    GIT_AUTHOR_NAME: 'Test',
    GIT_AUTHOR_EMAIL: 'test@example.com',
    GIT_COMMITTER_NAME: 'Test',
    GIT_COMMITTER_EMAIL: 'test@example.com',
  };
}

/** Runs git and resolves with its exit code and output; never throws (tests assert the code). */
export function runGit(env: NodeJS.ProcessEnv, cwd: string, args: readonly string[]): Promise<GitRun> {
  return new Promise((resolve) => {
    execFile('git', args, { cwd, env, maxBuffer: 64 << 20, timeout: 1_800_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1;
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * Drives the real `git` and `git lfs` binaries in a sandbox HOME, so no global config leaks in.
 * Credentials come from a `store` credential helper file, as a user's would.
 */
export class GitSandbox {
  readonly home: string;
  readonly env: NodeJS.ProcessEnv;

  private constructor(home: string) {
    this.home = home;
    this.env = sandboxEnv(home);
  }

  /** A sandbox whose credential store holds `token` for `serverUrl` (http://127.0.0.1:PORT). */
  static async create(home: string, serverUrl: string, token: string): Promise<GitSandbox> {
    mkdirSync(home, { recursive: true });
    const sb = new GitSandbox(home);
    const u = new URL(serverUrl);
    writeFileSync(join(home, '.git-credentials'), `${u.protocol}//git:${encodeURIComponent(token)}@${u.host}\n`, { mode: 0o600 });
    await sb.git(home, 'config', '--global', 'credential.helper', 'store');
    await sb.git(home, 'config', '--global', 'init.defaultBranch', 'main');
    await sb.git(home, 'lfs', 'install', '--skip-repo');
    return sb;
  }

  /** Replaces the stored credential (another user on the same machine). */
  setToken(serverUrl: string, token: string): void {
    const u = new URL(serverUrl);
    writeFileSync(join(this.home, '.git-credentials'), `${u.protocol}//git:${encodeURIComponent(token)}@${u.host}\n`, { mode: 0o600 });
  }

  async git(cwd: string, ...args: string[]): Promise<GitResult> {
    const r = await runGit(this.env, cwd, args);
    if (r.code !== 0) {
      throw Object.assign(new Error(`git ${args.join(' ')} failed with exit code ${r.code}\n${r.stderr}`), { stdout: r.stdout, stderr: r.stderr });
    }
    return r;
  }

  /** A bare remote plus a work tree whose .lfsconfig points LFS at `lfsUrl`, tracking *.bin and *.txt. */
  async newProject(dir: string, lfsUrl: string): Promise<{ remote: string; work: string }> {
    const remote = join(dir, 'remote.git');
    const work = join(dir, 'work');
    mkdirSync(dir, { recursive: true });
    await this.git(dir, 'init', '-q', '--bare', remote);
    await this.git(dir, 'init', '-q', work);
    await this.git(work, 'lfs', 'track', '*.bin', '*.txt');
    writeFileSync(join(work, '.lfsconfig'), `[lfs]\n\turl = ${lfsUrl}\n`);
    await this.git(work, 'remote', 'add', 'origin', remote);
    return { remote, work };
  }
}

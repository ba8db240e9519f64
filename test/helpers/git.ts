import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface GitResult {
  readonly stdout: string;
  readonly stderr: string;
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
    this.env = {
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
    try {
      return await run('git', args, { cwd, env: this.env, maxBuffer: 64 << 20 });
    } catch (e) {
      const err = e as Error & { stdout?: string; stderr?: string };
      throw Object.assign(new Error(`git ${args.join(' ')} failed: ${err.message}\n${err.stderr ?? ''}`), { stdout: err.stdout, stderr: err.stderr });
    }
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

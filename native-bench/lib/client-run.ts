import { spawn } from 'node:child_process';

/** One run of a real client (curl, git): wall time, the client's own CPU, and what it printed. */
export interface ClientRun {
  readonly ms: number;
  /** User + system CPU seconds of every process the run started (curl, git, git-lfs). */
  readonly clientCpuS: number;
  readonly stdout: string;
  readonly stderr: string;
}

// bash's `times` prints the shell's own CPU, then its children's: the client's CPU without ours.
const WRAP = '"$@"; rc=$?; times >&2; exit $rc';

/** "0m1.234s 0m0.050s" → 1.284 (user + system). */
function cpuOfTimesLine(line: string): number {
  let s = 0;
  for (const m of line.matchAll(/(\d+)m([\d.]+)s/g)) s += Number(m[1]) * 60 + Number(m[2]);
  return s;
}

/**
 * Runs a command under bash and waits for it; throws with its stderr when it fails. `script`
 * replaces the plain `"$@"` run when several processes must be started (its own `times` call
 * included, on stderr, as WRAP does).
 */
export function runClient(args: readonly string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; script?: string } = {}): Promise<ClientRun> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn('bash', ['-c', opts.script ?? WRAP, 'bash', ...args], { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.once('error', reject);
    child.once('close', (code) => {
      const ms = performance.now() - t0;
      const stderrAll = Buffer.concat(err).toString();
      const lines = stderrAll.trimEnd().split('\n');
      const children = lines.length >= 2 ? cpuOfTimesLine(lines[lines.length - 1]!) : NaN;
      const stderr = lines.slice(0, -2).join('\n');
      const stdout = Buffer.concat(out).toString();
      if (code !== 0) reject(new Error(`${args.slice(0, 2).join(' ')} exited with ${code}: ${stderr.slice(-2000)}`));
      else resolve({ ms, clientCpuS: children, stdout, stderr });
    });
  });
}

/** Starts one curl per config file at once and waits for all; fails if any fails. */
export const PARALLEL_CURLS = 'pids=(); for f in "$@"; do curl --config "$f" >"$f.out" & pids+=($!); done; rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; times >&2; exit $rc';

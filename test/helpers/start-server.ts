import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { capped, waitFor } from './wait-for.js';
import { SERVER_NODE_FLAGS } from '../../src/config/node-flags.js';

const here = dirname(fileURLToPath(import.meta.url));
/** dist/src/main.js, next to dist/test/helpers. */
export const MAIN = resolve(here, '../../src/main.js');

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  readonly child: ChildProcess;
  readonly logs: string[];
  /**
   * Resolves with the first JSON log line (already logged or still to come) that `match` accepts:
   * the event itself, never a time window. Rejects only on a hang (see wait-for.ts). `from` (an
   * earlier `logs.length`) skips what was logged before it.
   */
  waitForLog(match: (ev: Record<string, any>) => boolean, what: string, from?: number): Promise<Record<string, any>>;
  /** Like waitForLog, for the first `count` matching lines; `from` skips the lines before `logs[from]`. */
  waitForLogs(match: (ev: Record<string, any>) => boolean, count: number, what: string, from?: number): Promise<Record<string, any>[]>;
  /** SIGTERM and wait for exit; returns the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Every scratch dir this test process made; removed when it exits, whatever the test did. */
const scratchDirs: string[] = [];
process.once('exit', () => {
  for (const dir of scratchDirs) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // a dir still in use (a mount on it): leave it
    }
  }
});

export function tmpDir(prefix = 'stowage-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  scratchDirs.push(dir);
  return dir;
}

/**
 * Starts the real server (dist/src/main.js, with the node options npm run start:prod gives) as a
 * child process on 127.0.0.1 with an ephemeral port and its own data directory, and resolves once
 * it logs "listening".
 */
export async function startServer(env: Record<string, string> = {}, opts: { dataDir?: string; keepData?: boolean; nodeFlags?: readonly string[] } = {}): Promise<RunningServer> {
  const dataDir = opts.dataDir ?? tmpDir();
  const child = spawn(process.execPath, [...(opts.nodeFlags ?? SERVER_NODE_FLAGS), MAIN], {
    env: { PATH: process.env.PATH ?? '', SVC_HOST: '127.0.0.1', SVC_PORT: '0', SVC_DATA_DIR: dataDir, SVC_SHUTDOWN_GRACE: '5', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  const logWaiters = new Set<(line: string) => void>();
  child.stderr!.on('data', (d: Buffer) => logs.push(d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const port = await new Promise<number>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.on('line', (line) => {
      logs.push(line);
      for (const waiter of logWaiters) waiter(line);
      try {
        const ev = JSON.parse(line) as { msg?: string; port?: number };
        if (ev.msg === 'listening' && typeof ev.port === 'number') resolve(ev.port);
      } catch {
        // not a log line
      }
    });
    void exited.then((code) => reject(new Error(`server exited with ${code} before listening:\n${logs.join('\n')}`)));
  });
  const waitForLogs = (match: (ev: Record<string, any>) => boolean, count: number, what: string, from = 0): Promise<Record<string, any>[]> => {
    const found: Record<string, any>[] = [];
    const take = (line: string): boolean => {
      try {
        const ev = JSON.parse(line) as unknown;
        if (typeof ev === 'object' && ev !== null && match(ev as Record<string, any>)) found.push(ev as Record<string, any>);
      } catch {
        // not a log line
      }
      return found.length >= count;
    };
    if (logs.slice(from).some(take)) return Promise.resolve(found);
    let waiter: (line: string) => void = () => {};
    const seen = new Promise<Record<string, any>[]>((resolve) => {
      waiter = (line) => take(line) && resolve(found);
      logWaiters.add(waiter);
    });
    return capped(seen, `the server to log ${what}`).finally(() => logWaiters.delete(waiter));
  };
  const baseUrl = env.SVC_BASE_URL ?? `http://127.0.0.1:${port}`;
  return {
    url: baseUrl,
    port,
    dataDir,
    child,
    logs,
    async waitForLog(match, what, from) {
      return (await waitForLogs(match, 1, what, from))[0]!;
    },
    waitForLogs,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (child.exitCode === null) child.kill(signal);
      const code = await exited;
      if (!opts.keepData && !opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
      return code;
    },
  };
}

/**
 * Waits until `path` exists: small objects are acknowledged from the journal and get their own file
 * in the background, soon but with no bound a busy machine keeps (see wait-for.ts).
 */
export async function waitForFile(path: string): Promise<void> {
  await waitFor(() => existsSync(path), `${path} to appear`);
}

/**
 * Resolves once the request line of every request answered before this call is in `server.logs`
 * (SVC_LOG_REQUESTS on): one more request, GET /health, is made and its own line awaited, and the
 * server writes those lines in the order it finishes the answers. What is counted after it is final.
 */
export async function requestLogBarrier(server: RunningServer): Promise<void> {
  const mark = server.logs.length;
  const res = await fetch(`http://127.0.0.1:${server.port}/health`);
  await res.arrayBuffer();
  await server.waitForLog((ev) => ev.msg === 'request' && ev.route === 'health', 'the barrier request', mark);
}

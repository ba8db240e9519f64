import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { freePort } from './nginx.js';

/** What a test file is told when PostgreSQL is missing: the suite needs it (.ci/run installs it). */
export const POSTGRES_INSTALL_HINT = 'PostgreSQL is not installed: apt-get install -y postgresql (.ci/run does)';

/**
 * The directory holding initdb and postgres: PATH first, then Debian's versioned directories
 * (its package does not put the server binaries on PATH), newest version first. Null when absent.
 */
export function postgresBinDir(): string | null {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    // A symlink on PATH stands for the whole installation: psql and postgres sit beside its target.
    if (dir !== '' && existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres'))) return dirname(realpathSync(join(dir, 'initdb')));
  }
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => /^\d+$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  for (const v of versions) {
    const dir = join(root, v, 'bin');
    if (existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres'))) return dir;
  }
  return null;
}

/** True when a PostgreSQL server can be started here. A test that needs one fails (never skips) otherwise. */
export function hasPostgres(): boolean {
  return postgresBinDir() !== null;
}

/** A throwaway PostgreSQL server on loopback, owned by one test file. */
export interface TestPostgres {
  readonly port: number;
  /** Holds the data directory and the unix socket; removed at stop. */
  readonly dir: string;
  /** postgres://… for database `name` (superuser, trust authentication on loopback). */
  url(name: string): string;
  /** A fresh, empty database for one test (isolation without a server per test); returns its URL. */
  createDatabase(): Promise<string>;
  /** Stops the server as an outage would (fast shutdown: sessions are cut). Idempotent. */
  stop(): Promise<void>;
  /** Starts it again on the same port and data directory, after stop(). */
  restart(): Promise<void>;
}

/** The uid/gid to run the server as: PostgreSQL refuses to run as root, so root hands it to `postgres`. */
function serverUser(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  const r = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  const g = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
  if (r.status !== 0 || g.status !== 0) throw new Error('running as root and there is no `postgres` user to run PostgreSQL as (Debian\'s package creates it)');
  return { uid: Number(r.stdout.trim()), gid: Number(g.stdout.trim()) };
}

let databases = 0;

/**
 * Starts PostgreSQL in a temp directory (initdb, then postgres on 127.0.0.1 at a free port with its
 * socket in the same directory) and resolves once it logs that it accepts connections. `teardown`
 * (tap's t.teardown) is registered before anything starts, so a failing start still cleans up.
 * Call it before the file's first t.test: once the root test's subtests have all ended, tap runs a
 * teardown registered on it at once, which stops the server while it starts. `durable`: fsync and
 * synchronous commits on, as in production (benchmarks); tests leave them off.
 */
export async function startPostgres(teardown: (fn: () => Promise<void>) => void, opts: { durable?: boolean } = {}): Promise<TestPostgres> {
  const bin = postgresBinDir();
  if (bin === null) throw new Error(POSTGRES_INSTALL_HINT);
  const dir = mkdtempSync(join(tmpdir(), 'stowage-pg-'));
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();
  const stop = async (): Promise<void> => {
    const c = child;
    if (c === null) return;
    child = null;
    process.off('exit', killOnExit);
    // SIGINT is PostgreSQL's fast shutdown: open sessions are cut, as in an outage.
    if (c.exitCode === null && c.signalCode === null) c.kill('SIGINT');
    await exited;
  };
  // A test process that dies without its teardown must not leave a server behind.
  const killOnExit = (): void => {
    child?.kill('SIGKILL');
  };
  teardown(async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const user = serverUser();
  if (user !== null) chownSync(dir, user.uid, user.gid);
  const data = join(dir, 'data');
  const owner = user === null ? {} : { uid: user.uid, gid: user.gid };
  // -N: no fsync of the new cluster; trust: loopback and the private socket only.
  const init = spawnSync(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '-N'], {
    ...owner,
    cwd: dir,
    encoding: 'utf8',
  });
  if (init.status !== 0) throw new Error(`initdb failed (${init.status}): ${init.stderr}`);
  let port = 0;
  const launch = async (): Promise<void> => {
    port = port === 0 ? await freePort() : port;
    const args = [
      '-D', data, '-h', '127.0.0.1', '-p', String(port), '-k', dir,
      // The tests kill Stowage nodes, never this server, and throw its data away: no durability
      // is needed, and without fsync the server starts and commits without waiting on the disk.
      // `durable` keeps PostgreSQL's defaults (a commit waits for its WAL flush): for benchmarks.
      ...(opts.durable === true ? [] : ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']),
      '-c', 'max_connections=200', '-c', 'shared_buffers=16MB', '-c', 'logging_collector=off',
    ];
    const c = spawn(join(bin, 'postgres'), args, { ...owner, cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    child = c;
    exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    process.on('exit', killOnExit);
    let log = '';
    await new Promise<void>((resolve, reject) => {
      c.stderr!.setEncoding('utf8');
      c.stderr!.on('data', (d: string) => {
        log += d;
        // The event: the postmaster says so once it takes connections.
        if (log.includes('database system is ready to accept connections')) resolve();
      });
      c.once('exit', (code, signal) => reject(new Error(`postgres exited (${code ?? signal}) before accepting connections:\n${log}`)));
    });
    c.stderr!.removeAllListeners('data');
    c.stderr!.resume();
  };
  try {
    await launch();
  } catch (e) {
    // The free port can be taken between freePort() and the bind: one more try on another.
    if (!String(e).includes('could not bind') && !String(e).includes('could not create any TCP/IP sockets')) throw e;
    child = null;
    port = 0;
    await launch();
  }
  const url = (name: string): string => `postgres://postgres@127.0.0.1:${port}/${name}`;
  return {
    get port() {
      return port;
    },
    dir,
    url,
    async createDatabase() {
      const name = `t${process.pid}_${++databases}`;
      const r = await runPsql(bin, port, dir, `CREATE DATABASE ${name}`);
      if (r !== '') throw new Error(`CREATE DATABASE ${name} failed: ${r}`);
      return url(name);
    },
    stop,
    async restart() {
      await stop();
      await launch();
    },
  };
}

/** Runs one statement with psql over the private socket; resolves with stderr ('' on success). */
function runPsql(bin: string, port: number, socketDir: string, sql: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(join(bin, 'psql'), ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', socketDir, '-p', String(port), '-U', 'postgres', '-d', 'postgres', '-c', sql], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    c.stderr.setEncoding('utf8');
    c.stderr.on('data', (d: string) => (err += d));
    c.once('error', reject);
    c.once('exit', (code) => resolve(code === 0 ? '' : err || `psql exited ${code}`));
  });
}

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** deploy/nginx/stowage.conf, the configuration operators install (found from dist/test/helpers). */
export const NGINX_CONF = resolve(dirname(fileURLToPath(import.meta.url)), '../../../deploy/nginx/stowage.conf');

/** True when Debian's nginx is on PATH (.ci/run installs it). */
export function hasNginx(): boolean {
  return spawnSync('nginx', ['-v'], { stdio: 'ignore' }).status === 0;
}

/** A port free on loopback now (the OS picks it; nginx binds it right after). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Replaces `from` exactly `count` times, or throws: the file drifting from what the test expects must fail loudly. */
function replaceExactly(text: string, from: string, to: string, count: number): string {
  const found = text.split(from).length - 1;
  if (found !== count) throw new Error(`${NGINX_CONF}: expected ${count} × ${JSON.stringify(from)}, found ${found}`);
  return text.split(from).join(to);
}

export interface ProxyPorts {
  /** The Stowage nodes' ports: one upstream `server` line each, in this order. */
  readonly upstreams: readonly number[];
  /** The nodes' resumable-upload ports (SVC_TUS_PORT), likewise; without them, the main ports (the main listener answers tus paths as before it). */
  readonly tusUpstreams?: readonly number[];
  /** The TLS server block's port. */
  readonly https: number;
  /** The redirecting plain-HTTP server block's port. */
  readonly http: number;
}

/** The upstream `server` lines as shipped (main port, SVC_TUS_PORT); their parameters (passive health) are kept for every node. */
const UPSTREAM_LINE = /^( *)server 127\.0\.0\.1:8080( [^;\n]*)?;$/m;
const TUS_UPSTREAM_LINE = /^( *)server 127\.0\.0\.1:8081( [^;\n]*)?;$/m;

/** `conf` with the upstream line `line` matches replaced by one such line per port. */
function upstreamLines(conf: string, line: RegExp, ports: readonly number[]): string {
  const shipped = line.exec(conf);
  if (shipped === null || ports.length === 0) throw new Error(`${NGINX_CONF}: no upstream line ${line.source} to rewrite`);
  const [, indent, params = ''] = shipped;
  return conf.replace(line, ports.map((p) => `${indent}server 127.0.0.1:${p}${params};`).join('\n'));
}

/**
 * deploy/nginx/stowage.conf with only what differs on a test machine rewritten: loopback listen
 * ports instead of 80/443 (IPv6 listens dropped), one line per node in each upstream (with the
 * shipped line's parameters), server_name, and a self-signed certificate. Everything that shapes a transfer
 * or a failover is used as shipped.
 */
export function templateConf(ports: ProxyPorts, cert: string, key: string, opts: { tls?: boolean } = {}): string {
  let conf = upstreamLines(readFileSync(NGINX_CONF, 'utf8'), UPSTREAM_LINE, ports.upstreams);
  conf = upstreamLines(conf, TUS_UPSTREAM_LINE, ports.tusUpstreams ?? ports.upstreams);
  conf = replaceExactly(conf, '    listen [::]:80;\n', '', 1);
  conf = replaceExactly(conf, '    listen [::]:443 ssl;\n', '', 1);
  conf = replaceExactly(conf, 'listen 80;', `listen 127.0.0.1:${ports.http};`, 1);
  conf = replaceExactly(conf, 'server_name lfs.example.com;', 'server_name 127.0.0.1;', 2);
  if (opts.tls === false) {
    // Plain HTTP on the main port, for measuring the proxy without the cost of TLS (the bench).
    conf = replaceExactly(conf, 'listen 443 ssl;', `listen 127.0.0.1:${ports.https};`, 1);
    const before = conf;
    conf = conf.replace(/^ *ssl_\S+ .*;\n/gm, '');
    if (before.split('\n').length - conf.split('\n').length !== 5) throw new Error(`${NGINX_CONF}: expected 5 ssl_* lines`);
    return conf;
  }
  conf = replaceExactly(conf, 'listen 443 ssl;', `listen 127.0.0.1:${ports.https} ssl;`, 1);
  conf = replaceExactly(conf, '/etc/letsencrypt/live/lfs.example.com/fullchain.pem', cert, 1);
  conf = replaceExactly(conf, '/etc/letsencrypt/live/lfs.example.com/privkey.pem', key, 1);
  return conf;
}

export interface RunningNginx {
  readonly child: ChildProcess;
  readonly prefix: string;
  /**
   * The access log: one line per request, `"$request" $status $http_transfer_encoding
   * $upstream_addr` (the node or nodes that were tried, `, `-separated; see parseAccessLine).
   */
  readonly accessLog: string;
  readonly errorLog: string;
  stop(): Promise<void>;
}

/** A self-signed certificate for 127.0.0.1 (openssl), for the TLS server block. */
export function selfSignedCert(dir: string): { cert: string; key: string } {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl failed: ${r.stderr}`);
  return { cert, key };
}

/** Resolves once `port` accepts a connection; rejects if nginx exits first. Retries on refusal only. */
async function accepting(port: number, child: ChildProcess, errorLog: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}:\n${readLog(errorLog)}`);
    const ok = await new Promise<boolean>((resolve, reject) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', (e: NodeJS.ErrnoException) => (e.code === 'ECONNREFUSED' ? resolve(false) : reject(e)));
    });
    if (ok) return;
    if (attempt > 400) throw new Error(`nginx never accepted on ${port}:\n${readLog(errorLog)}`);
    // Not bound yet: nginx binds while it reads its configuration, so this is a few turns at most.
    await new Promise((r) => setTimeout(r, 10 + attempt));
  }
}

function readLog(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '(no log)';
  }
}

/**
 * Runs Debian's nginx in the foreground (`-p PREFIX -c nginx.conf -g 'daemon off;'`) with the
 * server blocks of `serverConf`; pid, logs and temp paths stay under `prefix`. Resolves once the
 * TLS port accepts connections.
 */
export async function startNginx(prefix: string, serverConf: string, httpsPort: number): Promise<RunningNginx> {
  // nginx's workers drop root for "nobody", who must reach the temp paths under the prefix: give it
  // a directory of its own right under the system temp dir.
  mkdirSync(prefix, { recursive: true });
  chmodSync(prefix, 0o755);
  for (const d of ['logs', 'tmp']) mkdirSync(join(prefix, d), { recursive: true, mode: 0o755 });
  const accessLog = join(prefix, 'logs', 'access.log');
  const errorLog = join(prefix, 'logs', 'error.log');
  const main = [
    `pid ${join(prefix, 'nginx.pid')};`,
    `error_log ${errorLog} info;`,
    'worker_processes 1;',
    'events { worker_connections 256; }',
    'http {',
    `  log_format stowage_test '"$request" $status $http_transfer_encoding $upstream_addr';`,
    `  access_log ${accessLog} stowage_test;`,
    ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((k) => `  ${k}_temp_path ${join(prefix, 'tmp', k)};`),
    serverConf,
    '}',
    '',
  ].join('\n');
  const confFile = join(prefix, 'nginx.conf');
  writeFileSync(confFile, main);
  const child = spawn('nginx', ['-p', prefix, '-e', errorLog, '-c', confFile, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stderr!.on('data', (d: Buffer) => process.stderr.write(`nginx: ${d}`));
  await accepting(httpsPort, child, errorLog);
  return {
    child,
    prefix,
    accessLog,
    errorLog,
    async stop() {
      // SIGQUIT: graceful shutdown, workers finish their requests.
      if (child.exitCode === null) child.kill('SIGQUIT');
      await exited;
    },
  };
}

/** One line of the test access log. */
export interface AccessLine {
  readonly method: string;
  readonly path: string;
  readonly status: number;
  /** Ports of the nodes nginx tried, in order (more than one when it passed the request on). */
  readonly upstreams: number[];
}

/** Parses a line of `RunningNginx.accessLog`; null for anything else (a blank last line). */
export function parseAccessLine(line: string): AccessLine | null {
  const m = /^"(\S+) (\S+) HTTP\/[\d.]+" (\d{3}) \S+ (.*)$/.exec(line);
  if (m === null) return null;
  const upstreams = [...m[4]!.matchAll(/:(\d+)/g)].map((p) => Number(p[1]));
  return { method: m[1]!, path: m[2]!, status: Number(m[3]), upstreams };
}

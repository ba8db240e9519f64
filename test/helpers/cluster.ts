import { readFileSync } from 'node:fs';
import { freePort, parseAccessLine, selfSignedCert, startNginx, templateConf, type AccessLine, type RunningNginx } from './nginx.js';
import type { S3Server } from './s3-server.js';
import { startServer, tmpDir, type RunningServer } from './start-server.js';

/** What a cluster runs on: the nodes' shared settings. */
export interface ClusterOptions {
  /** How many Stowage nodes (each its own process, port and data directory for staging). */
  readonly nodes: number;
  /** The bucket every node stores into (test/helpers/s3-server.ts). */
  readonly s3: S3Server;
  /**
   * The index every node shares (`SVC_DATABASE_URL`). Without it each node keeps its own SQLite
   * index in its data directory: N unrelated servers on one bucket, the state before PostgreSQL.
   */
  readonly databaseUrl?: string;
  /** More SVC_* settings, the same on every node (the forge, the grace…). */
  readonly env?: Record<string, string>;
  /** false: nginx serves plain HTTP on its main port (the bench: the proxy without TLS's cost). */
  readonly tls?: boolean;
}

/** N Stowage nodes behind nginx (deploy/nginx/stowage.conf with one upstream line per node). */
export interface Cluster {
  /** The public address: nginx's main port, TLS unless `tls: false` (every node's SVC_BASE_URL). */
  readonly url: string;
  /** nginx's self-signed certificate, for clients to trust (`http.sslCAInfo`, `ca`). */
  readonly cert: string;
  readonly nginx: RunningNginx;
  /** Each node's own port (fixed for the cluster's life: a restarted node comes back on it). */
  readonly ports: readonly number[];
  /** Each node's SVC_TUS_PORT when `env` sets one (fixed likewise, in nginx's tus upstream); empty otherwise. */
  readonly tusPorts: readonly number[];
  /** Node i as now running (a restart replaces it). */
  node(i: number): RunningServer;
  /** Node i's own address, bypassing nginx. */
  nodeUrl(i: number): string;
  /** Index of the node listening on `port` (from an access line's upstreams). */
  nodeOfPort(port: number): number;
  /** Signals node i (SIGKILL unless told) and resolves once it has exited, with its exit code. */
  kill(i: number, signal?: NodeJS.Signals): Promise<number | null>;
  /** Whether node i is running (not killed, or restarted since). */
  running(i: number): boolean;
  /** Starts node i again on its port and data directory; resolves once it listens. */
  restart(i: number): Promise<RunningServer>;
  /** nginx's access log so far, parsed. */
  accessLog(): AccessLine[];
}

/**
 * Starts `opts.nodes` Stowage nodes on one bucket (and one PostgreSQL index when given) behind
 * nginx, with TLS, as docs/cluster.md describes. The teardown is registered with `t` before
 * anything starts, so whatever did start is stopped even if a later step fails.
 */
export async function startCluster(t: { teardown(fn: () => unknown): void }, opts: ClusterOptions): Promise<Cluster> {
  const nodes: (RunningServer | null)[] = Array.from({ length: opts.nodes }, () => null);
  let nginx: RunningNginx | null = null;
  t.teardown(async () => {
    await nginx?.stop();
    await Promise.all(nodes.map((n) => n?.stop('SIGKILL')));
  });

  const root = tmpDir('stowage-cluster-');
  const https = await freePort();
  const http = await freePort();
  const ports: number[] = [];
  for (let i = 0; i < opts.nodes; i++) ports.push(await freePort());
  // With resumable uploads on, each node's SVC_TUS_PORT is fixed too, for nginx's tus upstream.
  const tusPorts: number[] = [];
  if (opts.env?.SVC_TUS_PORT !== undefined) for (let i = 0; i < opts.nodes; i++) tusPorts.push(await freePort());
  const url = `${opts.tls === false ? 'http' : 'https'}://127.0.0.1:${https}`;
  const dataDirs = ports.map((_, i) => tmpDir(`stowage-cluster-node${i}-`));
  const env = (i: number): Record<string, string> => ({
    ...opts.s3.env(),
    ...(opts.databaseUrl !== undefined ? { SVC_DATABASE_URL: opts.databaseUrl } : {}),
    // Links in batch answers point at the proxy, on every node alike.
    SVC_BASE_URL: url,
    SVC_PORT: String(ports[i]),
    SVC_LOG_REQUESTS: 'true',
    ...opts.env,
    ...(tusPorts.length > 0 ? { SVC_TUS_PORT: String(tusPorts[i]) } : {}),
  });
  const start = async (i: number): Promise<RunningServer> => {
    const server = await startServer(env(i), { dataDir: dataDirs[i] });
    nodes[i] = server;
    return server;
  };
  // One after another: the first start creates the schema (and the others find it migrated), as
  // a rolling deploy would; starting them together is the migration lock's own test.
  for (let i = 0; i < opts.nodes; i++) await start(i);

  const { cert, key } = selfSignedCert(root);
  nginx = await startNginx(tmpDir('stowage-cluster-nginx-'), templateConf({ https, http, upstreams: ports, ...(tusPorts.length > 0 ? { tusUpstreams: tusPorts } : {}) }, cert, key, { tls: opts.tls }), https);
  const running = nginx;

  const node = (i: number): RunningServer => {
    const n = nodes[i];
    if (n === null || n === undefined) throw new Error(`node ${i} is not running`);
    return n;
  };
  return {
    url,
    cert,
    nginx: running,
    ports,
    tusPorts,
    node,
    nodeUrl: (i) => `http://127.0.0.1:${ports[i]}`,
    nodeOfPort(port) {
      const i = ports.indexOf(port);
      if (i < 0) throw new Error(`no node listens on ${port}`);
      return i;
    },
    async kill(i, signal = 'SIGKILL') {
      const code = await node(i).stop(signal);
      nodes[i] = null;
      return code;
    },
    running: (i) => nodes[i] !== null,
    restart: (i) => {
      if (nodes[i] !== null) throw new Error(`node ${i} is still running`);
      return start(i);
    },
    accessLog: () =>
      readFileSync(running.accessLog, 'utf8')
        .split('\n')
        .map(parseAccessLine)
        .filter((l): l is AccessLine => l !== null),
  };
}


// First: it holds the young generation's size while the server's modules load.
import { endStartupHeap } from './util/startup-heap.js';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ConfigError, configWarnings, loadConfig } from './config/load.js';
import { missingServerFlags } from './config/node-flags.js';
import type { Config } from './config/schema.js';
import { StartRefusedError } from './errors/start-refused.js';
import { onPoolsReleased } from './store/buffer-pool.js';
import { log } from './util/log.js';
import { VERSION } from './util/version.js';

/** Where objects go, as the start-up line names it. */
function storeLabel(config: Config): string {
  if (config.s3 === null) return `disk ${config.dataDir}/objects`;
  return `s3 ${config.s3.endpoint}/${config.s3.bucket}/${config.s3.prefix}`;
}

/** Process entry: the only place that reads process.env or calls process.exit. */
async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig(process.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`stowage: configuration error: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  for (const warning of configWarnings(process.env)) log('configuration warning', { level: 'warn', warning });
  const missing = missingServerFlags(process.execArgv, process.env.NODE_OPTIONS);
  if (missing.length > 0) log('started without the node options npm run start:prod gives: more memory under load (docs/operations.md)', { missing: missing.join(' ') });
  // At rest V8 collects nothing (nothing allocates): buffers a burst left idle are let go after a
  // quiet spell, in steps.
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as (options: { type: 'major'; execution: 'async' }) => void;
  onPoolsReleased(() => gc({ type: 'major', execution: 'async' }));
  // Imported here: a static import is compiled before startup-heap holds the young generation.
  const { startApp } = await import('./app.js');
  const app = await startApp(config);
  endStartupHeap();
  // The one line that says what this server is using (tests and scripts wait for its "listening").
  log('listening', {
    version: VERSION,
    host: config.host,
    port: app.port,
    tus_port: app.tusPort,
    base_url: app.baseUrl,
    dashboard: app.dashboardUrl,
    auth: config.auth.provider,
    store: storeLabel(config),
    compression: config.compressionLevel === null ? 'off' : `zstd:${config.compressionLevel}`,
    index: app.index,
    ...(app.frameCipher === null ? {} : { frame_cipher: app.frameCipher }),
    data_dir: config.dataDir,
  });
  if (app.firstRun) {
    log('first run', {
      hint:
        `New data directory. Point a repository at ${app.baseUrl}/{org}/{repo} (lfs.url in its .lfsconfig); ` +
        `set SVC_BASE_URL to the address clients use${config.baseUrl === null ? ' (unset now)' : ''}; ` +
        `sign in to the dashboard at ${app.dashboardUrl} with a forge site admin's token or set SVC_ADMIN_REPO; ` +
        'scrape /metrics (deploy/prometheus, deploy/grafana).',
    });
  }

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log('shutting down', { signal, grace_s: config.shutdownGrace });
    app.close().then(
      () => {
        log('stopped', {});
        process.exit(0);
      },
      (e: unknown) => {
        log('shutdown failed', { level: 'error', err: String(e) });
        process.exit(1);
      },
    );
  };
  // A promise nobody awaited failed: a bug, but not one worth cutting every transfer in flight for.
  process.on('unhandledRejection', (reason) => log('unhandled rejection', { level: 'error', err: String((reason as Error)?.stack ?? reason) }));
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((e: unknown) => {
  if (e instanceof StartRefusedError) {
    process.stderr.write(`stowage: refusing to start: ${e.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`stowage: failed to start: ${(e as Error)?.stack ?? String(e)}\n`);
  process.exit(1);
});

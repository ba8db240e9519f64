import { startApp } from './app.js';
import { ConfigError, loadConfig } from './config/load.js';
import { StartRefusedError } from './errors/start-refused.js';
import { log } from './util/log.js';

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
  const app = await startApp(config);
  log('listening', { host: config.host, port: app.port, base_url: app.baseUrl, data_dir: config.dataDir, auth: config.auth.provider });

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
        log('shutdown failed', { err: String(e) });
        process.exit(1);
      },
    );
  };
  // A promise nobody awaited failed: a bug, but not one worth cutting every transfer in flight for.
  process.on('unhandledRejection', (reason) => log('unhandled rejection', { err: String((reason as Error)?.stack ?? reason) }));
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

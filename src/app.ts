import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from './config/schema.js';
import { openDatabase } from './db/database.js';
import { ObjectsRepo } from './db/objects-repo.js';
import { ForgeHttpClient } from './forge/client.js';
import { createForgeAdapter } from './forge/index.js';
import { registerHealthRoutes } from './http/routes/health.js';
import { registerObjectRoutes } from './http/routes/objects.js';
import { sendError } from './http/respond.js';
import { HttpServer } from './http/server.js';
import { lfsError } from './errors/errors.js';
import { Metrics } from './metrics/registry.js';
import { AccessService } from './service/access-service.js';
import { BatchService } from './service/batch-service.js';
import { TransferService } from './service/transfer-service.js';
import { DiskBlobStore } from './store/disk.js';
import { log as defaultLog } from './util/log.js';

export interface App {
  /** The port actually bound (useful with SVC_PORT=0). */
  readonly port: number;
  readonly baseUrl: string;
  /** Graceful: stop accepting, drain in-flight transfers up to the grace period, close the index. */
  close(): Promise<void>;
}

/** Composition root: builds every part from the config, wires the routes, and listens. */
export async function startApp(config: Config, log = defaultLog): Promise<App> {
  mkdirSync(config.dataDir, { recursive: true });
  const db = openDatabase(join(config.dataDir, 'index.sqlite'));
  const store = await DiskBlobStore.open(config.dataDir);
  const swept = await store.sweepStaging(60_000);
  if (swept > 0) log('swept staging files left by an earlier run', { count: swept });

  const metrics = new Metrics();
  const forgeHttp = new ForgeHttpClient(config.auth.forgeTimeout);
  const access = new AccessService(createForgeAdapter(config, forgeHttp), config.auth, metrics);
  const objects = new ObjectsRepo(db);
  const links = { baseUrl: config.baseUrl ?? '', chunkedUploadThreshold: config.chunkedUploadThreshold };
  const batch = new BatchService(objects, links);
  const transfers = new TransferService(store, objects, metrics);

  const http = new HttpServer(metrics, log, config.logRequests);
  registerHealthRoutes(http, { store, metrics });
  registerObjectRoutes(http, { access, batch, transfers });
  http.route('any', '/*', 'not_found', (ctx) => sendError(ctx, lfsError('LFS_ERR_NOT_FOUND'), log));

  const sweeper = setInterval(() => {
    store.sweepStaging(config.stagingMaxAge * 1000).catch((e: unknown) => log('staging sweep failed', { err: String(e) }));
  }, 3600_000);
  sweeper.unref();

  const port = await http.listen(config.host, config.port);
  if (config.baseUrl === null) {
    const host = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host.includes(':') ? `[${config.host}]` : config.host;
    links.baseUrl = `http://${host}:${port}`;
  }
  return {
    port,
    baseUrl: links.baseUrl,
    async close() {
      clearInterval(sweeper);
      await http.close(config.shutdownGrace * 1000);
      await forgeHttp.close();
      db.close();
    },
  };
}

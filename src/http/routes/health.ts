import type { Metrics } from '../../metrics/registry.js';
import type { BlobStore } from '../../store/types.js';
import type { Index } from '../../db/index-types.js';
import { send, sendJson } from '../respond.js';
import type { HttpServer } from '../server.js';
import { lfsError } from '../../errors/errors.js';

/** Probes and the Prometheus exposition: open to all (design §3). */
export function registerHealthRoutes(http: HttpServer, deps: { store: BlobStore; index: Index; metrics: Metrics }): void {
  http.route('get', '/health', 'health', (ctx) => sendJson(ctx, 200, { status: 'ok' }));

  http.route('get', '/ready', 'ready', async (ctx) => {
    try {
      await deps.store.checkWritable();
    } catch (e) {
      throw lfsError('LFS_ERR_NOT_READY', `Storage is not writable: ${(e as Error).message}`);
    }
    try {
      await deps.index.ping();
    } catch (e) {
      throw lfsError('LFS_ERR_NOT_READY', `The index cannot be reached: ${(e as Error).message}`);
    }
    sendJson(ctx, 200, { status: 'ready' });
  });

  http.route('get', '/metrics', 'metrics', async (ctx) => {
    const text = await deps.metrics.registry.metrics();
    send(ctx, 200, text, {}, deps.metrics.registry.contentType);
  });
}

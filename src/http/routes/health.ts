import type { Metrics } from '../../metrics/registry.js';
import type { BlobStore } from '../../store/types.js';
import type { Index } from '../../db/index-types.js';
import { send, sendJson } from '../respond.js';
import type { RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';
import { lfsError } from '../../errors/errors.js';

/** Probes and the Prometheus exposition: open to all (design §3). */
export function registerHealthRoutes(http: HttpServer, guard: RouteGuard, deps: { store: BlobStore; index: Index; metrics: Metrics }): void {
  guard.route(http, 'health', (ctx) => sendJson(ctx, 200, { status: 'ok' }));

  guard.route(http, 'ready', async (ctx) => {
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

  guard.route(http, 'metrics', async (ctx) => {
    const text = await deps.metrics.registry.metrics();
    send(ctx, 200, text, {}, deps.metrics.registry.contentType);
  });
}

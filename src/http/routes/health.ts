import type { Metrics } from '../../metrics/registry.js';
import type { BlobStore } from '../../store/types.js';
import type { Index } from '../../db/index-types.js';
import { send, sendJson } from '../respond.js';
import type { RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';
import { lfsError } from '../../errors/errors.js';
import { createHash, timingSafeEqual } from 'node:crypto';

/** Probes and /metrics, open to all but the store-wide series, which need `metricsToken`: they would tell whether another repository holds an oid. */
export function registerHealthRoutes(http: HttpServer, guard: RouteGuard, deps: { store: BlobStore; index: Index; metrics: Metrics; metricsToken: string | null }): void {
  const digest = (s: string): Buffer => createHash('sha256').update(s, 'latin1').digest();
  const wanted = deps.metricsToken === null ? null : digest(`Bearer ${deps.metricsToken}`);
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
    const authorization = ctx.header('authorization');
    // No credentials: the open series. Credentials: exactly the metrics token, compared in constant
    // time; anything else is refused rather than quietly answered with less.
    const storeWide = authorization !== '' && wanted !== null && timingSafeEqual(digest(authorization.replace(/^bearer /i, 'Bearer ')), wanted);
    if (authorization !== '' && !storeWide) throw lfsError('LFS_ERR_METRICS_TOKEN_REJECTED', undefined, { 'WWW-Authenticate': 'Bearer realm="Stowage metrics"' });
    const text = await deps.metrics.exposition(storeWide);
    send(ctx, 200, text, {}, deps.metrics.registry.contentType);
  });
}

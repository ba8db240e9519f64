import { stat, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import type { CacheConfig } from '../config/schema.js';
import type { Hasher } from '../format/frame-codec.js';
import type { Metrics } from '../metrics/registry.js';
import type { Oid } from '../protocol/oid.js';
import type { DiskReserve } from '../store/disk-reserve.js';
import { DiskBlobStore } from '../store/disk.js';
import { VerifyingBlobStore } from '../store/layers/verify.js';
import { CacheLedger } from './cache-ledger.js';
import { CacheMetrics } from './cache-metrics.js';
import { CacheService } from './cache-service.js';
import { FillCoordinator } from './fill-coordinator.js';
import { LinkSigner } from './link-signer.js';
import { UpstreamClient } from './upstream-client.js';

export interface CacheModeParts {
  readonly config: CacheConfig;
  readonly dataDir: string;
  readonly directIo: boolean;
  readonly hasher: Hasher;
  readonly reserve: DiskReserve | null;
  readonly metrics: Metrics;
  readonly baseUrl: () => string;
  readonly chunkedUploadThreshold: number;
}

/** Cache mode, built: what its routes need, and its close. */
export interface CacheMode {
  readonly cache: CacheService;
  readonly upstream: UpstreamClient;
  readonly metrics: CacheMetrics;
  close(): Promise<void>;
}

/**
 * Builds cache mode (SVC_UPSTREAM_LFS_URL; docs/cache.md): its objects in `cache/` of the data
 * directory, a store of its own (disk, verified writes, no journal: a cached copy can always be
 * fetched again), the ledger rebuilt from it, the fill coordinator and the link signer.
 */
export async function openCacheMode(p: CacheModeParts): Promise<CacheMode> {
  const dir = join(p.dataDir, 'cache');
  const disk = await DiskBlobStore.open(dir, { directIo: p.directIo });
  const store = new VerifyingBlobStore(disk, p.hasher);
  const upstream = new UpstreamClient(p.config.upstreamTemplate);
  let fills: FillCoordinator | null = null;
  let ledger: CacheLedger | null = null;
  const metrics = new CacheMetrics(
    p.metrics,
    () => fills?.inFlight ?? 0,
    () => ({ bytes: ledger?.bytes ?? 0, objects: ledger?.count ?? 0 }),
  );
  // Last use is the object file's mtime, set at each use (placing a fill or upload sets it too).
  const touch = (oid: Oid): void => {
    const now = new Date();
    void utimes(disk.pathOf(oid), now, now).catch(() => undefined);
  };
  const lastUse = async (oid: Oid): Promise<number> => (await stat(disk.pathOf(oid))).mtimeMs;
  const fillsDir = join(dir, 'fills');
  // Before the ledger lists the store: placed fills a crash left undurable are removed.
  await FillCoordinator.recover(fillsDir, (oid) => disk.pathOf(oid));
  ledger = await CacheLedger.open(disk, p.config.maxSize, p.reserve, { evicted: () => metrics.evicted(), used: touch }, lastUse);
  fills = await FillCoordinator.open(fillsDir, (oid) => disk.pathOf(oid), ledger, upstream, {
    started: () => undefined,
    ended: () => undefined,
    fetched: (bytes) => metrics.fetched(bytes),
  });
  await disk.sweepStaging(0);
  metrics.start();
  const cache = new CacheService({
    upstream,
    links: new LinkSigner(p.config.linkSecret),
    ledger,
    fills,
    store,
    events: metrics,
    baseUrl: p.baseUrl,
    chunkedUploadThreshold: p.chunkedUploadThreshold,
  });
  const filling = fills;
  return {
    cache,
    upstream,
    metrics,
    close: async () => {
      await filling.close();
      await upstream.close();
    },
  };
}

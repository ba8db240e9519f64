import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { join } from 'node:path';
import type { Config } from './config/schema.js';
import { DataDirLock } from './db/data-dir-lock.js';
import { openIndex } from './db/open-index.js';
import { ClusterNode } from './service/cluster-node.js';
import { ClusterUploads } from './service/cluster-uploads.js';
import { sharedKey } from './service/shared-secret.js';
import { indexReferenceLog } from './service/index-reference-log.js';
import { LookupBudget } from './forge/budget.js';
import { ForgeHttpClient } from './forge/client.js';
import { createForgeAdapter } from './forge/index.js';
import { registerHealthRoutes } from './http/routes/health.js';
import { registerLockRoutes } from './http/routes/locks.js';
import { registerObjectRoutes } from './http/routes/objects.js';
import { registerMaintenanceRoutes } from './http/routes/maintenance.js';
import { MaintenanceService } from './service/maintenance/maintenance-service.js';
import { WorkerTasks } from './service/maintenance/worker-tasks.js';
import type { JobKind } from './service/maintenance/job-runner.js';
import { DASHBOARD_PATH, registerDashboardRoutes } from './http/routes/dashboard.js';
import { registerRepoPageRoutes } from './http/routes/repo-page.js';
import { registerTusRoutes } from './http/routes/tus.js';
import { registerCacheRoutes } from './http/routes/cache.js';
import type { TusFront } from './http/tus-front.js';
import { ResumableUploads, type TusUploads } from './service/resumable-uploads.js';
import { SharedResumableUploads } from './service/shared-resumable-uploads.js';
import { RouteGuard } from './http/route-policy.js';
import { parseRepoName } from './protocol/repo-name.js';
import { SessionService } from './service/session-service.js';
import { PolicedAccessService } from './service/policed-access-service.js';
import { SettingsService } from './service/settings-service.js';
import { StatsService } from './service/stats-service.js';
import { sweepAfterCrash } from './service/startup-sweep.js';
import { sendError } from './http/respond.js';
import { refuseBody } from './http/request-body.js';
import { HttpServer } from './http/server.js';
import { RequestLog } from './http/request-log.js';
import { lfsError } from './errors/errors.js';
import { Metrics } from './metrics/registry.js';
import { BatchService } from './service/batch-service.js';
import { LockService } from './service/lock-service.js';
import { DownloadGrants } from './service/download-grants.js';
import { TransferService } from './service/transfer-service.js';
import { composeStore, openBackend } from './store/compose.js';
import { openKeyRing } from './crypto/start-keys.js';
import { frameGcmEngine, frameGcmMissing } from './crypto/frame-gcm.js';
import { DiskReserve } from './store/disk-reserve.js';
import { RetirementScheduler } from './store/journal/retirement.js';
import { hashedOffLoop, warmHasherFor } from './store/layers/verify.js';
import { PresignService } from './service/presign-service.js';
import { openHasher } from './workers/native-hasher.js';
import { WorkerPool } from './workers/pool.js';
import { log as defaultLog } from './util/log.js';
import { startThreadpoolNudge } from './util/threadpool-nudge.js';

export interface App {
  /** The port actually bound (useful with SVC_PORT=0). */
  readonly port: number;
  /** The resumable-upload listener's port (SVC_TUS_PORT), null when resumable uploads are off. */
  readonly tusPort: number | null;
  readonly baseUrl: string;
  /** The dashboard page's URL. */
  readonly dashboardUrl: string;
  /** The SQLite index's path. */
  readonly index: string;
  /** With encryption keys: which AES-256-GCM seals and opens frames (crypto/frame-gcm.ts); else null. */
  readonly frameCipher: string | null;
  /** True when this start created the index: a fresh data directory (main.ts prints a first-run hint). */
  readonly firstRun: boolean;
  /** Graceful: stop accepting, drain in-flight transfers up to the grace period, close the index. */
  close(): Promise<void>;
}

/** Composition root: builds every part from the config, wires the routes, and listens. */
export async function startApp(config: Config, log = defaultLog): Promise<App> {
  mkdirSync(config.dataDir, { recursive: true });
  // Before anything in the directory is touched: another server there would lose its staging files.
  const lock = DataDirLock.acquire(config.dataDir);
  // A lost threadpool wakeup (glibc) must not strand an fsync for good: see threadpool-nudge.ts.
  const stopNudge = startThreadpoolNudge(config.dataDir);
  const index = join(config.dataDir, 'index.sqlite');
  const firstRun = config.databaseUrl === null && !existsSync(index);
  // SVC_DATABASE_URL: the PostgreSQL index every node shares; otherwise the SQLite file above.
  const db = await openIndex(config, log);
  // Before anything is served: a start that could not read every encrypted object refuses.
  const ring = await openKeyRing(config.encryption, db.dataKeys);
  if (ring !== null && frameGcmMissing() !== '') log('the frame cipher addon did not load (npm run build compiles it): frames are sealed with node:crypto, several times slower', { level: 'warn', err: frameGcmMissing() });
  const pool = new WorkerPool(config.workers);
  // Large uploads are hashed by the sha256 addon (scripts/build-native.mjs) on a native thread; without
  // it, on a worker thread of their own (more memory, a start of ~30 ms after each rest).
  const { hasher, missing } = openHasher();
  if (missing !== null) log('the sha256 addon did not load (npm run build compiles it): large uploads are hashed on a worker thread', { level: 'warn', err: missing });
  const objects = db.objects;
  // A shared index (PostgreSQL) means other nodes may run beside this one: this node heartbeats,
  // records its uploads in flight while a retain sweep is open, and takes job leases in the index
  // (service/cluster-node.ts, service/cluster-uploads.ts).
  const node = db.kind === 'postgres' ? await ClusterNode.join(db.nodes, log) : null;
  // SVC_STORE picks the backend; compose.ts builds the same stack on either. Only one node on its
  // own disk and its own index keeps the node-local journal: with a bucket or a shared index an
  // acknowledged object must be in the store and its reference in the index before the 200.
  const backend = await openBackend(config, log);
  const disk = backend.kind === 'disk' ? backend : null;
  const s3 = backend.kind === 's3' ? backend : null;
  const {
    store: blobs,
    backend: layered,
    journal,
  } = await composeStore({
    backend,
    encryption: { keys: db.dataKeys, ring, encryptNew: config.encryption.encryptNew },
    codec: pool,
    hasher,
    compressionLevel: config.compressionLevel,
    journal:
      disk === null || node !== null
        ? null
        : {
            dir: join(config.dataDir, 'journal'),
            references: indexReferenceLog(db),
          },
  });
  if (disk !== null && node !== null) {
    log('objects are stored on this node\'s disk: other nodes sharing the index cannot serve them (use SVC_STORE=s3 for several nodes)', { level: 'warn' });
  }
  if (s3 !== null) void s3.sweepStaging(config.stagingMaxAge * 1000).catch(() => 0);

  // What /metrics reads at scrape time: metricSources below, once what it reads is built.
  const metrics = new Metrics(() => metricSources);
  // Every forge call, whichever adapter makes it, spends from the one server-wide budget (docs/behaviour.md, "Caches and budget").
  const lookupBudget = new LookupBudget(config.auth.lookupBudget);
  const forgeHttp = new ForgeHttpClient(config.auth.forgeTimeout, lookupBudget);
  if (journal !== null) {
    // The journal holds every acknowledged upload's reference: restore any the index lost in a crash.
    const replay = await journal.recover();
    if (replay.replayed > 0) log('journal replayed', { records: replay.replayed });
    if (replay.deferred > 0) log('index full: journal references deferred until there is room', { records: replay.deferred });
  }
  // The data directory is this process's alone (its lock), so are the staging and object files on its disk.
  if (disk !== null) await sweepAfterCrash(disk, objects, (oid) => journal?.holds(oid) ?? false, log);
  const retirement = journal === null ? null : new RetirementScheduler(journal, log);
  // Access settings are enforced inside authorize, so every /{org}/{repo} route obeys them.
  const statsRepo = db.stats;
  const settings = await SettingsService.open(db.settings, statsRepo, objects, metrics, config.access, node !== null);
  const access = new PolicedAccessService(settings, createForgeAdapter(config, forgeHttp), { ...config.auth, identifyCallers: config.logRequests, budget: lookupBudget }, metrics);
  const links = { baseUrl: config.baseUrl ?? '', chunkedUploadThreshold: config.chunkedUploadThreshold };
  let presign: PresignService | undefined;
  if (s3 !== null && config.s3!.presign && ring !== null) log('SVC_S3_PRESIGN is set, but a link would hand out ciphertext: with encryption keys every transfer goes through the server', { level: 'warn' });
  if (s3 !== null && blobs.presigner !== null && config.s3!.presign) {
    const enforced = await s3.probeChecksumEnforcement();
    log('presigned bucket links on', { checksumEnforced: enforced });
    // Verify links are signed with a key every node sharing the index derives alike (PresignService).
    const verifyKey = await sharedKey(db.settings, 'stowage verify links');
    presign = new PresignService(blobs.presigner, { ttl: config.s3!.presignTtl, verifyKey });
  }
  // Only the disk store writes object bytes into the data directory: there new uploads stop short of
  // SVC_DISK_RESERVE. With a bucket the data directory holds the index alone (or nothing, with
  // PostgreSQL), which uploads grow by a row each: no reserve there.
  const reserve = disk === null ? null : new DiskReserve(config.dataDir, config.diskReserve);
  // A batch's downloads are looked up once, by the batch: their GETs follow within moments.
  const grants = new DownloadGrants();
  // Only the hash thread (no addon) has a start to get ahead of; the addon is always ready, so its
  // batches announce nothing. After the answer has gone: starting a thread holds the event loop ~5 ms
  // (the batch took 6 ms instead of 1). Small objects, most of a batch's, schedule nothing.
  const uploadAhead =
    missing === null
      ? null
      : (size: number): void => {
          if (hashedOffLoop(size)) setImmediate(() => warmHasherFor(hasher, size));
        };
  const cluster = node === null ? null : await ClusterUploads.start(node, db.maintenance, log);
  const transfers = new TransferService(blobs, objects, metrics, { cluster, reserve, grants, promoter: presign, log });
  // Resumable (tus) uploads keep their partial bytes in this node's data directory with the disk
  // store on one node, and in the index and the bucket with a bucket (any number of nodes). The disk
  // store with a shared index (not a supported cluster) answers basic, as if SVC_TUS_PORT were unset.
  // Partial uploads are kept in the clear (files, or parts in the bucket): not with encryption on.
  const resumable: TusUploads | null =
    config.tusPort === null || config.encryption.encryptNew
      ? null
      : s3 !== null
        ? new SharedResumableUploads({
            index: db.resumable,
            objects,
            transfers,
            hasher,
            parts: s3.partStore(),
            // One node on its own: no heartbeats, so a hold a previous run left is no live node's.
            node: node ?? { id: randomBytes(9).toString('base64url'), liveSince: () => Number.MAX_SAFE_INTEGER },
            limits: settings,
            ttlSeconds: config.uploadResumeTtl,
            log,
          })
        : disk === null || node !== null
          ? null
          : await ResumableUploads.open(config.dataDir, { objects, transfers, hasher, limits: settings, ttlSeconds: config.uploadResumeTtl, log }, (key) => {
              const [org, repo, ...rest] = key.split('/');
              return org === undefined || repo === undefined || rest.length > 0 ? null : parseRepoName(org, repo);
            });
  if (resumable !== null) settings.countPartialBytes(async (repoKey, except) => resumable.bytesOf(repoKey, except));
  if (config.tusPort !== null && config.encryption.encryptNew) log('SVC_TUS_PORT is set, but partial uploads would be kept unencrypted: with encryption on uploads stay basic', { level: 'warn' });
  else if (config.tusPort !== null && resumable === null) log('SVC_TUS_PORT is set, but the disk store on several nodes keeps no resumable uploads: uploads stay basic', { level: 'warn' });
  const tusLinks = { baseUrl: config.baseUrl ?? '' };
  // The disk store also serves the legacy per-repository layout until dedupe folds it.
  const batch = new BatchService(objects, links, {
    limits: settings,
    legacy: blobs.legacy,
    presign,
    grants,
    uploadAhead,
    reserve,
    tus: resumable === null ? null : { baseUrl: () => tusLinks.baseUrl, announce: (repo, oid, size) => resumable.announce(repo, oid, size) },
  });
  // The maintenance jobs' low-priority pool: whole-file tasks and the compress job's frame codec.
  const maintenanceTasks = new WorkerTasks(config.workers);
  const maintenance = await MaintenanceService.open({
    index: db,
    node,
    store: blobs,
    backend: layered,
    codec: maintenanceTasks,
    hasher,
    pool,
    uploads: transfers,
    graceSeconds: config.gcGrace,
    stagingMaxAgeSeconds: config.stagingMaxAge,
    compressionLevel: config.compressionLevel,
    importDir: config.importDir,
    partials: resumable,
    keys: ring,
    stored: backend,
    rewrapBatch: config.rewrapBatch,
    journal,
    log,
  });

  const requestLog = config.logRequests ? new RequestLog(log, { trustProxy: config.trustProxy, userIdOf: (token) => access.knownUserId(token) }) : null;
  const http = new HttpServer(metrics, log, requestLog);
  const adminRepo = config.adminRepo === null ? null : parseRepoName(config.adminRepo.split('/')[0]!, config.adminRepo.split('/')[1]!);
  const sessions = new SessionService(db.sessions, access, { adminRepo, ttlSeconds: config.sessionTtl });
  // Every route's permission, body cap and cross-site rules: one table (route-policy.ts).
  const guard = new RouteGuard({ access, sessions, baseUrl: () => links.baseUrl });
  registerHealthRoutes(http, guard, { store: blobs, index: db, metrics, metricsToken: config.metricsToken });
  // SVC_UPSTREAM_LFS_URL: a cache in front of another LFS server (docs/cache.md), whose object and
  // lock routes take the place of this server's own.
  const cacheMode =
    config.cache === null
      ? null
      : // Loaded only in cache mode: its upstream client brings undici, which an ordinary node never loads at start.
        await (await import('./cache/cache-mode.js')).openCacheMode({ config: config.cache, dataDir: config.dataDir, directIo: config.directIo, hasher, reserve, metrics, baseUrl: () => links.baseUrl, chunkedUploadThreshold: config.chunkedUploadThreshold });
  if (cacheMode === null) {
    registerObjectRoutes(http, guard, { access, batch, transfers, limits: settings, presign });
    if (resumable !== null) registerTusRoutes(http, guard, { access, transfers, uploads: resumable, maxSize: () => settings.current.maxObjectSize });
    registerLockRoutes(http, guard, { locks: new LockService(db.locks, access, { maxAge: config.lockMaxAge }, log) });
  } else {
    registerCacheRoutes(http, guard, {
      cache: cacheMode.cache,
      upstream: cacheMode.upstream,
      served: (source, bytes) => cacheMode.metrics.served(source, bytes),
      countUploadBytes: transfers.countUploadBytes,
      repositoryFigures: (repo) => cacheMode.metrics.repository(repo),
    });
    log('cache mode: objects and locks come from the upstream', { maxSize: config.cache!.maxSize, linkSecret: config.cache!.linkSecret === null ? 'per process' : 'SVC_CACHE_LINK_SECRET' });
  }
  const stats = new StatsService(statsRepo, metrics, { lockMaxAge: config.lockMaxAge, workers: config.workers, work: maintenance });
  if (cacheMode === null) {
    registerMaintenanceRoutes(http, guard, { access, maintenance });
    registerRepoPageRoutes(http, guard, { access, stats });
  }
  const cacheFigures = cacheMode === null ? null : () => cacheMode.metrics.figures(config.cache!.maxSize);
  registerDashboardRoutes(http, guard, { sessions, settings, stats, cacheFigures, baseUrl: () => links.baseUrl });
  stats.start();
  // What /metrics reads at scrape time (store figures at most once a minute).
  const metricSources = {
    lookupBudget: () => ({ used: lookupBudget.used(), limit: lookupBudget.limit }),
    storeFigures: async () => {
      const [t, locks] = await Promise.all([statsRepo.serverTotals(), statsRepo.lockTotal()]);
      return { objects: t.objects, logicalBytes: t.logicalBytes, storedBytes: t.storedBytes, locks };
    },
    pools: () => maintenance.poolLoads(),
    jobs: async () => (await maintenance.jobs()).running,
    jobKinds: ['retain', 'dedupe', 'compress', 'audit', 'import', 'rewrap', 'rekey', 'encrypt'] satisfies JobKind[],
    journal: () => journal?.flushStats ?? null,
    deferredReferences: () => journal?.deferredReferences ?? 0,
    audits: () => statsRepo.auditTotals(),
    quarantined: () => statsRepo.quarantinedTotal(),
    dataDir: async () => {
      const fs = await statfs(config.dataDir);
      return { freeBytes: fs.bavail * fs.bsize, sizeBytes: fs.blocks * fs.bsize };
    },
    partialUploads: () => resumable?.figures() ?? { count: 0, bytes: 0 },
    reserve: () => (reserve === null ? { bytes: 0, reached: false } : { bytes: reserve.bytes, reached: reserve.reached() }),
    ready: () => Promise.all([blobs.checkWritable(), db.ping()]).then(() => true, () => false),
  };
  http.route('any', '/*', 'not_found', (ctx) => {
    refuseBody(ctx);
    const known = http.knownPath(ctx.url);
    sendError(ctx, known ? lfsError('LFS_ERR_METHOD_NOT_ALLOWED', undefined, { Allow: known }) : lfsError('LFS_ERR_NOT_FOUND'), log);
  });

  const sweeper = setInterval(() => {
    blobs.sweepStaging(config.stagingMaxAge * 1000).catch((e: unknown) => log('staging sweep failed', { level: 'warn', err: String(e) }));
    resumable?.sweep().catch((e: unknown) => log('partial upload sweep failed', { level: 'warn', err: String(e) }));
  }, 3600_000);
  sweeper.unref();

  const port = await http.listen(config.host, config.port);
  if (config.baseUrl === null) {
    const host = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host.includes(':') ? `[${config.host}]` : config.host;
    links.baseUrl = `http://${host}:${port}`;
  }
  let front: TusFront | null = null;
  if (resumable !== null) {
    // It passes requests to the main listener on this machine: a wildcard host is reached on the loopback.
    const upstreamHost = config.host === '0.0.0.0' ? '127.0.0.1' : config.host === '::' ? '::1' : config.host;
    // Imported here: it brings undici, which a server without resumable uploads never loads.
    const { startTusFront } = await import('./http/tus-front.js');
    front = await startTusFront(config.host, config.tusPort!, { host: upstreamHost, port }, log);
    if (config.baseUrl === null) {
      const host = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host.includes(':') ? `[${config.host}]` : config.host;
      tusLinks.baseUrl = `http://${host}:${front.port}`;
    }
  }
  return {
    port,
    tusPort: front?.port ?? null,
    baseUrl: links.baseUrl,
    dashboardUrl: `${links.baseUrl}${DASHBOARD_PATH}`,
    index,
    firstRun,
    frameCipher: ring === null ? null : frameGcmEngine(),
    async close() {
      clearInterval(sweeper);
      const retired = retirement?.stop(); // no round starts from here on
      await maintenance.close(); // jobs stop at their next object; a rerun finishes them
      await front?.close();
      await http.close(config.shutdownGrace * 1000);
      await forgeHttp.close();
      await cacheMode?.close();
      await s3?.close();
      await retired;
      await journal?.close();
      await pool.close();
      await maintenanceTasks.close();
      await hasher.close();
      await stats.close().catch((e: unknown) => log('last stats sample failed', { level: 'warn', err: String(e) }));
      await node?.leave();
      await db.close();
      stopNudge();
      lock.release();
    },
  };
}

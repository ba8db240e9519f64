import type { CacheRepositoryFigures } from '../../cache/cache-metrics.js';
import type { CacheService } from '../../cache/cache-service.js';
import type { UpstreamAnswer, UpstreamClient } from '../../cache/upstream-client.js';
import { lfsError } from '../../errors/errors.js';
import { parseBatchRequest } from '../../protocol/batch.js';
import { parseRange } from '../../protocol/range.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { RequestContext } from '../context.js';
import { BodyPump, refuseBody } from '../request-body.js';
import { send, sendHead, sendJson, sendStream } from '../respond.js';
import { NOT_ON_A_CACHE, ROUTES, type GuardedCall, type RouteGuard, type RouteName } from '../route-policy.js';
import type { HttpServer } from '../server.js';
import { repoOf, oidOf, checkAccept } from './path-params.js';

const DOWNLOAD_HEADERS: Readonly<Record<string, string>> = { 'Content-Type': 'application/octet-stream', 'Accept-Ranges': 'bytes' };

export interface CacheRoutesDeps {
  readonly cache: CacheService;
  readonly upstream: UpstreamClient;
  /** Bytes sent to clients, by where they came from. */
  readonly served: (source: 'cache' | 'upstream', bytes: number) => void;
  readonly countUploadBytes: (bytes: number) => void;
  /** A repository's hits and misses since the start. */
  readonly repositoryFigures: (repo: RepoName) => CacheRepositoryFigures;
}

/** The upstream's answer as it came: its status, its JSON body and the headers that ask for credentials. */
function relay(ctx: RequestContext, answer: UpstreamAnswer): void {
  send(ctx, answer.status, JSON.stringify(answer.body), { ...answer.headers });
}

/** A lock query names paths, cursors, limits and refspecs: only URL-safe characters go on. */
const QUERY_RE = /^[A-Za-z0-9%._~&=+\-/]{0,4096}$/;
/** A lock id as the upstream gave it (Stowage's, GitHub's, GitLab's): a token of safe characters. */
const LOCK_ID_RE = /^[A-Za-z0-9_.-]{1,128}$/;

/**
 * Cache mode's routes (docs/cache.md). Every decision is the upstream's: batches and lock calls go
 * to it with the client's Authorization; transfers are admitted by the signed links the batch
 * handed out (LinkSigner), checked before any body byte past PRE_AUTH_BYTES is read.
 */
export function registerCacheRoutes(http: HttpServer, guard: RouteGuard, deps: CacheRoutesDeps): void {
  const { cache, upstream } = deps;

  guard.route(http, 'cache_batch', async (ctx, call) => {
    const repo = repoOf(ctx);
    checkAccept(ctx);
    // The upstream authorizes the batch, which it needs to read: the body is taken up to its cap.
    call.admit();
    const request = parseBatchRequest(await call.json());
    relay(ctx, await cache.batch(repo, request, ctx.header('authorization'), ctx.signal));
  });

  guard.route(http, 'cache_download', async (ctx) => {
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    const link = cache.check('download', repo, oid, ctx.query, ctx.header('authorization'));
    const source = await cache.download(repo, oid, link, ctx.header('authorization'));
    try {
      const total = source.size;
      const range = ctx.header('range') === '' ? ({ kind: 'none' } as const) : parseRange(ctx.header('range'), total);
      if (range.kind === 'unsatisfiable') throw lfsError('LFS_ERR_RANGE_NOT_SATISFIABLE', undefined, { 'Content-Range': `bytes */${total}` });
      const headers: Record<string, string> = { ...DOWNLOAD_HEADERS };
      const served = (bytes: number): void => deps.served(source.source, bytes);
      if (range.kind === 'range') {
        headers['Content-Range'] = `bytes ${range.start}-${range.end}/${total}`;
        await sendStream(ctx, 206, headers, await source.open(range.start, range.end), range.end - range.start + 1, served);
      } else if (total === 0) {
        send(ctx, 200, '', headers, null);
      } else {
        await sendStream(ctx, 200, headers, await source.open(0, total - 1), total, served);
      }
    } finally {
      await source.close();
    }
  });

  // As GET, head only: the link is checked and nothing is filled or counted as a download.
  guard.route(http, 'cache_download_head', (ctx) => {
    const oid = oidOf(ctx.params[2]!);
    const link = cache.check('download', repoOf(ctx), oid, ctx.query, ctx.header('authorization'));
    sendHead(ctx, 200, DOWNLOAD_HEADERS, cache.headSize(link, oid));
  });

  /** The repository's figures, once the upstream said this caller may read it. */
  const figuresFor = async (ctx: RequestContext): Promise<CacheRepositoryFigures | null> => {
    const repo = repoOf(ctx);
    const refusal = await cache.mayRead(repo, ctx.header('authorization'), ctx.signal);
    if (refusal === null) return deps.repositoryFigures(repo);
    relay(ctx, refusal);
    return null;
  };
  guard.route(http, 'cache_repo_stats', async (ctx) => {
    const figures = await figuresFor(ctx);
    if (figures !== null) send(ctx, 200, JSON.stringify(figures), { 'Cache-Control': 'no-store' }, 'application/json; charset=utf-8');
  });
  guard.route(http, 'cache_repo_page', async (ctx) => {
    const figures = await figuresFor(ctx);
    if (figures === null) return;
    const { renderCacheRepoPage } = await import('../pages/cache-repo-page.js');
    const page = renderCacheRepoPage(figures);
    send(ctx, 200, page.html, page.headers, 'text/html; charset=utf-8');
  });

  // Jobs over an index a cache never fills, and tus (basic transfers only): a clear refusal, not a 404.
  for (const name of NOT_ON_A_CACHE) {
    guard.route(http, name, (ctx) => {
      // A streamed body (tus PATCH) has no reader yet: it is refused unread, as before authorization.
      if (ROUTES[name].body.kind === 'stream') refuseBody(ctx);
      throw lfsError('LFS_ERR_NOT_ON_A_CACHE');
    });
  }

  guard.route(http, 'cache_upload', async (ctx) => {
    // The pump first: uWS hands the body only to an onData registered before the handler returns.
    const body = new BodyPump(ctx, deps.countUploadBytes);
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    const link = cache.check('upload', repo, oid, ctx.query, ctx.header('authorization'));
    for (const name of ['content-length', 'x-lfs-object-size']) {
      const v = ctx.header(name);
      if (v !== '' && v !== String(link.size)) throw lfsError('LFS_ERR_SIZE_MISMATCH', `${name} ${v.slice(0, 20)} is not the object's size ${link.size}`);
    }
    body.authorized();
    await cache.upload(oid, link, ctx.header('authorization'), (writer) => body.into(writer));
    sendJson(ctx, 200, {});
  });

  const lockRelay = (name: RouteName, method: 'GET' | 'POST', path: (ctx: RequestContext) => string): void => {
    guard.route(http, name, async (ctx, call: GuardedCall) => {
      const repo = repoOf(ctx);
      checkAccept(ctx);
      call.admit();
      const body = method === 'POST' ? ((await call.json()) ?? {}) : undefined;
      relay(ctx, await upstream.json(method, repo, path(ctx), { authorization: ctx.header('authorization') }, body, ctx.signal));
    });
  };
  lockRelay('cache_lock_create', 'POST', () => '/locks');
  lockRelay('cache_lock_list', 'GET', (ctx) => {
    if (!QUERY_RE.test(ctx.query)) throw lfsError('LFS_ERR_BAD_REQUEST', 'The query holds characters a lock query has not');
    return ctx.query === '' ? '/locks' : `/locks?${ctx.query}`;
  });
  lockRelay('cache_lock_verify', 'POST', () => '/locks/verify');
  lockRelay('cache_lock_unlock', 'POST', (ctx) => {
    const id = ctx.params[2]!;
    if (!LOCK_ID_RE.test(id)) throw lfsError('LFS_ERR_LOCK_NOT_FOUND');
    return `/locks/${id}/unlock`;
  });
}

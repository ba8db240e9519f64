import { ERROR_CODES } from '../../errors/codes.js';
import { lfsError } from '../../errors/errors.js';
import { parseCreateLockRequest, parseListLocksQuery, parseUnlockRequest, parseVerifyLocksRequest } from '../../protocol/locks.js';
import { acceptsLfsJson } from '../../protocol/media-types.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { LockService } from '../../service/lock-service.js';
import { tokenFromAuthorization } from '../auth.js';
import type { RequestContext } from '../context.js';
import { sendJson } from '../respond.js';
import type { GuardedCall, RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';
import { repoOf } from './path-params.js';

export interface LockRoutesDeps {
  readonly locks: LockService;
}

function tokenOf(ctx: RequestContext): string | null {
  return tokenFromAuthorization(ctx.header('authorization'));
}

/** Locking POSTs carry `application/vnd.git-lfs+json` (locking.md), checked by the route guard even for an empty body; push before the body is read. */
async function jsonBody(ctx: RequestContext, call: GuardedCall, repo: RepoName): Promise<unknown> {
  if (!acceptsLfsJson(ctx.header('accept'))) throw lfsError('LFS_ERR_NOT_ACCEPTABLE');
  await call.authorize(repo);
  return call.json();
}

/** The File Locking API routes, thin: authorize → parse → LockService → respond, every answer `application/vnd.git-lfs+json`. */
export function registerLockRoutes(http: HttpServer, guard: RouteGuard, deps: LockRoutesDeps): void {
  const { locks } = deps;

  guard.route(http, 'lock_create', async (ctx, call) => {
    const repo = repoOf(ctx);
    const parsed = await jsonBody(ctx, call, repo);
    const result = await locks.create(tokenOf(ctx), repo, parseCreateLockRequest(parsed), ctx.signal);
    if (result.kind === 'created') {
      sendJson(ctx, 201, { lock: result.lock });
      return;
    }
    // The one error whose body carries more than a message (locking.md "Bad Response: Lock Exists"),
    // so it is written here rather than thrown to the error boundary.
    sendJson(ctx, ERROR_CODES.LFS_ERR_LOCK_EXISTS.status, { lock: result.lock, message: result.message, request_id: ctx.requestId });
  });

  guard.route(http, 'lock_list', async (ctx) => {
    const repo = repoOf(ctx);
    if (!acceptsLfsJson(ctx.header('accept'))) throw lfsError('LFS_ERR_NOT_ACCEPTABLE');
    const token = tokenOf(ctx);
    const query = parseListLocksQuery(ctx.query);
    sendJson(ctx, 200, await locks.list(token, repo, query, ctx.signal));
  });

  guard.route(http, 'lock_verify', async (ctx, call) => {
    const repo = repoOf(ctx);
    const request = parseVerifyLocksRequest(await jsonBody(ctx, call, repo));
    sendJson(ctx, 200, await locks.verify(tokenOf(ctx), repo, request, ctx.signal));
  });

  guard.route(http, 'lock_unlock', async (ctx, call) => {
    const repo = repoOf(ctx);
    const id = ctx.params[2]!;
    const request = parseUnlockRequest(await jsonBody(ctx, call, repo));
    // "Successful deletions return the deleted lock" with 200 (https://github.com/git-lfs/git-lfs/blob/main/docs/api/locking.md).
    sendJson(ctx, 200, { lock: await locks.unlock(tokenOf(ctx), repo, id, request, ctx.signal) });
  });
}

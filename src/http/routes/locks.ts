import { ERROR_CODES } from '../../errors/codes.js';
import { lfsError } from '../../errors/errors.js';
import { parseCreateLockRequest, parseListLocksQuery, parseUnlockRequest, parseVerifyLocksRequest } from '../../protocol/locks.js';
import { acceptsLfsJson, isJsonRequestType } from '../../protocol/media-types.js';
import { parseRepoName, type RepoName } from '../../protocol/repo-name.js';
import type { LockService } from '../../service/lock-service.js';
import { tokenFromAuthorization } from '../auth.js';
import type { RequestContext } from '../context.js';
import { collectBody, parseJson } from '../request-body.js';
import { sendJson } from '../respond.js';
import type { HttpServer } from '../server.js';

/** Lock request bodies are a path and a ref; 64 KiB is far above need (design: cap every buffered body). */
const LOCK_BODY_CAP = 64 * 1024;

/** What the lock routes need. */
export interface LockRoutesDeps {
  readonly locks: LockService;
}

function repoOf(ctx: RequestContext): RepoName {
  const repo = parseRepoName(ctx.params[0]!, ctx.params[1]!);
  if (repo === null) throw lfsError('LFS_ERR_BAD_PATH', 'Not a valid repository name');
  return repo;
}

function tokenOf(ctx: RequestContext): string | null {
  return tokenFromAuthorization(ctx.header('authorization'));
}

/**
 * "All File Locking requests require … Accept: application/vnd.git-lfs+json" and, with a body, that
 * Content-Type (locking.md). An empty body (a hand-written unlock) is read as `{}`.
 */
async function jsonBody(ctx: RequestContext, body: Promise<Buffer>): Promise<unknown> {
  if (!acceptsLfsJson(ctx.header('accept'))) throw lfsError('LFS_ERR_NOT_ACCEPTABLE');
  const bytes = await body;
  if (bytes.length === 0) return undefined;
  if (!isJsonRequestType(ctx.header('content-type'))) throw lfsError('LFS_ERR_BAD_MEDIA_TYPE');
  return parseJson(bytes);
}

/**
 * The File Locking API routes, thin: parse → LockService → respond. Every answer, errors included,
 * is `application/vnd.git-lfs+json` (respond.ts). Requests are validated before the permission
 * check, so a malformed one costs no forge lookup; a 422 says nothing about the repository.
 */
export function registerLockRoutes(http: HttpServer, deps: LockRoutesDeps): void {
  const { locks } = deps;

  http.route('post', '/:org/:repo/locks', 'lock_create', async (ctx) => {
    const body = collectBody(ctx, LOCK_BODY_CAP);
    const repo = repoOf(ctx);
    const parsed = await jsonBody(ctx, body);
    const result = await locks.create(tokenOf(ctx), repo, parseCreateLockRequest(parsed), ctx.signal);
    if (result.kind === 'created') {
      sendJson(ctx, 201, { lock: result.lock });
      return;
    }
    // The one error whose body carries more than a message (locking.md "Bad Response: Lock Exists"),
    // so it is written here rather than thrown to the error boundary.
    sendJson(ctx, ERROR_CODES.LFS_ERR_LOCK_EXISTS.status, { lock: result.lock, message: result.message, request_id: ctx.requestId });
  });

  http.route('get', '/:org/:repo/locks', 'lock_list', async (ctx) => {
    const repo = repoOf(ctx);
    if (!acceptsLfsJson(ctx.header('accept'))) throw lfsError('LFS_ERR_NOT_ACCEPTABLE');
    const token = tokenOf(ctx);
    const query = parseListLocksQuery(ctx.query);
    sendJson(ctx, 200, await locks.list(token, repo, query, ctx.signal));
  });

  http.route('post', '/:org/:repo/locks/verify', 'lock_verify', async (ctx) => {
    const body = collectBody(ctx, LOCK_BODY_CAP);
    const repo = repoOf(ctx);
    const request = parseVerifyLocksRequest(await jsonBody(ctx, body));
    sendJson(ctx, 200, await locks.verify(tokenOf(ctx), repo, request, ctx.signal));
  });

  http.route('post', '/:org/:repo/locks/:id/unlock', 'lock_unlock', async (ctx) => {
    const body = collectBody(ctx, LOCK_BODY_CAP);
    const repo = repoOf(ctx);
    const id = ctx.params[2]!;
    const request = parseUnlockRequest(await jsonBody(ctx, body));
    // "Successful deletions return the deleted lock" with 200 (locking.md; client doc (e)).
    sendJson(ctx, 200, { lock: await locks.unlock(tokenOf(ctx), repo, id, request, ctx.signal) });
  });
}

import { lfsError } from '../../errors/errors.js';
import type { AccessService } from '../../service/access-service.js';
import { TUS_VERSION, type TusUploads } from '../../service/resumable-uploads.js';
import type { TransferService } from '../../service/transfer-service.js';
import { tokenFromAuthorization } from '../auth.js';
import type { RequestContext } from '../context.js';
import { BodyPump } from '../request-body.js';
import { send, sendHead } from '../respond.js';
import type { RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';
import { repoOf, oidOf } from './path-params.js';

export interface TusRoutesDeps {
  readonly access: AccessService;
  readonly transfers: TransferService;
  readonly uploads: TusUploads;
  /** Largest object an upload may announce (Tus-Max-Size); 0: no limit but the index's. */
  readonly maxSize: () => number;
}

/** The tus content type of a PATCH body. */
const OFFSET_STREAM = 'application/offset+octet-stream';

/**
 * tus 1.0.0: a request naming another version is 412. One naming none is taken as 1.0.0: git-lfs
 * 3.3.0 sends Tus-Resumable on its PATCH only, not on its HEAD.
 */
function checkVersion(ctx: RequestContext): void {
  const v = ctx.header('tus-resumable');
  if (v !== '' && v !== TUS_VERSION) throw lfsError('LFS_ERR_TUS_VERSION', undefined, { 'Tus-Version': TUS_VERSION });
}

/**
 * The tus core protocol and its termination extension on the upload href a batch hands out to a
 * client that offers tus (docs/resumable-uploads.md). Authorization is a PUT's: push on the
 * repository in the path; the partial upload is this repository's own (TusUploads).
 */
export function registerTusRoutes(http: HttpServer, guard: RouteGuard, deps: TusRoutesDeps): void {
  const { access, transfers, uploads } = deps;
  const tusHeaders = (extra: Record<string, string> = {}): Record<string, string> => ({ 'Tus-Resumable': TUS_VERSION, 'Cache-Control': 'no-store', ...extra });

  guard.route(http, 'tus_options', (ctx) => {
    const max = deps.maxSize();
    send(ctx, 204, '', { 'Tus-Resumable': TUS_VERSION, 'Tus-Version': TUS_VERSION, 'Tus-Extension': 'termination', ...(max > 0 ? { 'Tus-Max-Size': String(max) } : {}) }, null);
  });

  guard.route(http, 'tus_head', async (ctx) => {
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    checkVersion(ctx);
    await access.authorizeUpload(tokenFromAuthorization(ctx.header('authorization')), repo, oid, ctx);
    const at = await uploads.status(repo, oid);
    if (at === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND', 'No upload of this object was offered to this repository: ask the batch first');
    sendHead(ctx, 200, tusHeaders({ 'Upload-Offset': String(at.offset), 'Upload-Length': String(at.size) }), 0);
  });

  guard.route(http, 'tus_patch', async (ctx) => {
    // First, synchronously: uWS hands the body only to an onData registered before the handler returns.
    const body = new BodyPump(ctx, transfers.countUploadBytes);
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    checkVersion(ctx);
    if (ctx.header('content-type') !== OFFSET_STREAM) throw lfsError('LFS_ERR_BAD_MEDIA_TYPE', `Content-Type must be ${OFFSET_STREAM}`);
    const offsetHeader = ctx.header('upload-offset');
    if (!/^\d{1,16}$/.test(offsetHeader)) throw lfsError('LFS_ERR_BAD_REQUEST', 'Upload-Offset must be a number of bytes');
    const offset = Number(offsetHeader);
    const judge = await access.authorizeUpload(tokenFromAuthorization(ctx.header('authorization')), repo, oid, ctx);
    body.authorized();
    const at = await uploads.patch(repo, oid, offset, body, judge);
    send(ctx, 204, '', tusHeaders({ 'Upload-Offset': String(at) }), null);
  });

  guard.route(http, 'tus_delete', async (ctx) => {
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    checkVersion(ctx);
    await access.authorizeUpload(tokenFromAuthorization(ctx.header('authorization')), repo, oid, ctx);
    if (!(await uploads.terminate(repo, oid))) throw lfsError('LFS_ERR_NOT_FOUND', 'No partial upload of this object in this repository');
    send(ctx, 204, '', tusHeaders(), null);
  });
}

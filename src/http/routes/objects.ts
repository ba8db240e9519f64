import { lfsError } from '../../errors/errors.js';
import { parseBatchRequest } from '../../protocol/batch.js';
import { parseOid, type Oid } from '../../protocol/oid.js';
import { parseRange } from '../../protocol/range.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { AccessService } from '../../service/access-service.js';
import { EXPECTED_SIZE_HEADER, type BatchService } from '../../service/batch-service.js';
import type { PresignService } from '../../service/presign-service.js';
import type { UploadLimits } from '../../service/settings-service.js';
import type { TransferService } from '../../service/transfer-service.js';
import { tokenFromAuthorization } from '../auth.js';
import type { RequestContext } from '../context.js';
import { BodyPump } from '../request-body.js';
import { send, sendHead, sendJson, sendStream } from '../respond.js';
import type { RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';
import { repoOf, oidOf, checkAccept } from './path-params.js';

/** What a download (GET or HEAD) says of the object beside its length. */
const DOWNLOAD_HEADERS: Readonly<Record<string, string>> = { 'Content-Type': 'application/octet-stream', 'Accept-Ranges': 'bytes' };

export interface ObjectRoutesDeps {
  readonly access: AccessService;
  readonly batch: BatchService;
  readonly transfers: TransferService;
  readonly limits?: UploadLimits;
  readonly presign?: PresignService;
}

function parseSizeHeader(value: string): number | null {
  if (!/^\d{1,16}$/.test(value)) return null;
  return Number(value);
}

export function registerObjectRoutes(http: HttpServer, guard: RouteGuard, deps: ObjectRoutesDeps): void {
  const { access, batch, transfers } = deps;

  guard.route(http, 'batch', async (ctx, call) => {
    const repo = repoOf(ctx);
    checkAccept(ctx);
    // Pull before the body is read; an upload batch needs push, known once the body is.
    await call.authorize(repo);
    const request = parseBatchRequest(await call.json());
    if (request.operation === 'upload') await call.authorize(repo, 'push');
    sendJson(ctx, 200, await batch.answer(repo, request));
  });

  guard.route(http, 'verify', async (ctx, call) => {
    const repo = repoOf(ctx);
    checkAccept(ctx);
    // A presigned upload's verify link is signed for one object (PresignService) and checked in place
    // of forge credentials, which the client does not send for authenticated objects.
    const signed = deps.presign?.isSignedVerify(ctx.query) ?? false;
    if (signed) call.admit();
    else await call.authorize(repo);
    const parsed = (await call.json()) as { oid?: unknown; size?: unknown } | null | undefined;
    const oid = parseOid(parsed?.oid);
    const size = parsed?.size;
    if (oid === null) throw lfsError('LFS_ERR_BAD_REQUEST', 'oid must be 64 lowercase hex digits');
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) throw lfsError('LFS_ERR_BAD_REQUEST', 'size must be a whole number of bytes');
    if (signed) deps.presign!.checkVerifyLink(repo, ctx.query, oid, size);
    await transfers.verify(repo, oid, size);
    sendJson(ctx, 200, { oid, size });
  });

  // Any Content-Type: a PUT cannot come from another site's page without a preflight (ROUTES).
  guard.route(http, 'upload', async (ctx) => {
    // Attach the body pump first: uWS delivers data only to a handler registered synchronously.
    // Until the uploader is authorized it holds PRE_AUTH_BYTES, then pauses the socket.
    const body = new BodyPump(ctx, transfers.countUploadBytes);
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    // The client sniffs Content-Type from the file (git-lfs https://github.com/git-lfs/git-lfs/blob/v3.3.0/tq/basic_upload.go): any is accepted.
    const contentLength = ctx.header('content-length');
    const announced = ctx.header('x-lfs-object-size');
    let expected: number | null = null;
    if (contentLength !== '') {
      expected = parseSizeHeader(contentLength);
      if (expected === null) throw lfsError('LFS_ERR_BAD_REQUEST', 'Content-Length is not a size');
    }
    if (announced !== '') {
      const n = parseSizeHeader(announced);
      if (n === null) throw lfsError('LFS_ERR_BAD_REQUEST', `${EXPECTED_SIZE_HEADER} is not a size`);
      if (expected !== null && expected !== n) throw lfsError('LFS_ERR_SIZE_MISMATCH', `Content-Length ${expected} differs from ${EXPECTED_SIZE_HEADER} ${n}`);
      expected = n;
    }
    const judge = await access.authorizeUpload(tokenFromAuthorization(ctx.header('authorization')), repo, oid, ctx);
    body.authorized();
    // --- access settings: refuse or cut an upload past the max object size or the quota.
    body.limit((await deps.limits?.admitPut(repo, oid, expected)) ?? null);
    // --- end access settings
    // The answer may go before the reference commits (TransferService.upload).
    await transfers.upload(repo, oid, body, expected, judge, () => sendJson(ctx, 200, {}));
  });

  // HEAD answers as GET does, head only (RFC 9110 §9.3.2): Content-Length is the object's size.
  // Range is ignored, as for any method but GET (RFC 9110 §14.2), and nothing counts as a download.
  guard.route(http, 'download_head', async (ctx) => {
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    await access.authorize(tokenFromAuthorization(ctx.header('authorization')), repo, 'pull', ctx);
    const reader = await transfers.openForDownload(repo, oid);
    try {
      sendHead(ctx, 200, DOWNLOAD_HEADERS, reader.size);
    } finally {
      await reader.close();
    }
  });

  guard.route(http, 'download', (ctx) => {
    const repo = repoOf(ctx);
    const oid = oidOf(ctx.params[2]!);
    const token = tokenFromAuthorization(ctx.header('authorization'));
    const authorized = access.authorizedInLine(token, repo, 'pull') !== null;
    // A clone's GET right after its batch, of a small object, with the token's answer cached: answered
    // before this handler returns, with no await.
    if (authorized && ctx.header('range') === '') {
      const held = transfers.openInLine(repo, oid);
      if (held !== undefined) {
        const size = held.bytes.byteLength;
        try {
          // uWS takes what the socket does not into its own buffer: the pooled bytes are free after this.
          send(ctx, 200, held.bytes, DOWNLOAD_HEADERS, null);
        } finally {
          held.release();
        }
        transfers.countDownloadBytes(size);
        transfers.countDownloaded(size, ctx.responded && !ctx.aborted);
        return;
      }
    }
    return download(ctx, repo, oid, token, authorized);
  });

  /** A GET through the store's readers; `authorized` when authorizedInLine granted it already. */
  const download = async (ctx: RequestContext, repo: RepoName, oid: Oid, token: string | null, authorized: boolean): Promise<void> => {
    if (!authorized) await access.authorize(token, repo, 'pull', ctx);
    const reader = await transfers.openForDownload(repo, oid);
    let sent = 0;
    try {
      const total = reader.size;
      const range = ctx.header('range') === '' ? ({ kind: 'none' } as const) : parseRange(ctx.header('range'), total);
      if (range.kind === 'unsatisfiable') {
        // A 416 carries the object's real size.
        throw lfsError('LFS_ERR_RANGE_NOT_SATISFIABLE', undefined, { 'Content-Range': `bytes */${total}` });
      }
      const headers: Record<string, string> = { ...DOWNLOAD_HEADERS };
      if (range.kind === 'range') {
        headers['Content-Range'] = `bytes ${range.start}-${range.end}/${total}`;
        const length = range.end - range.start + 1;
        await sendStream(ctx, 206, headers, reader.read(range.start, range.end), length, transfers.countDownloadBytes);
        sent = length;
      } else if (total === 0) {
        send(ctx, 200, '', headers, null);
      } else {
        await sendStream(ctx, 200, headers, reader.read(0, total - 1), total, transfers.countDownloadBytes);
        sent = total;
      }
    } finally {
      await reader.close();
      transfers.countDownloaded(sent, ctx.responded && !ctx.aborted);
    }
  };
}

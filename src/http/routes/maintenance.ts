import { lfsError } from '../../errors/errors.js';
import { parseOid, type Oid } from '../../protocol/oid.js';
import { parseRepoName, type RepoName } from '../../protocol/repo-name.js';
import type { AccessService } from '../../service/access-service.js';
import type { Job } from '../../service/maintenance/job-runner.js';
import type { MaintenanceService } from '../../service/maintenance/maintenance-service.js';
import { IMPORT_LAYOUTS, parseImportLayout } from '../../store/foreign-layout.js';
import { tokenFromAuthorization } from '../auth.js';
import type { RequestContext } from '../context.js';
import { collectBody, parseJson } from '../request-body.js';
import { sendJson } from '../respond.js';
import type { HttpServer } from '../server.js';

/** Retain names every oid still referenced: 100 000 oids ≈ 7 MB of JSON. */
const RETAIN_BODY_CAP = 64 << 20;
const SMALL_BODY_CAP = 64 << 10;

export interface MaintenanceRoutesDeps {
  readonly access: AccessService;
  readonly maintenance: MaintenanceService;
}

function repoOf(ctx: RequestContext): RepoName {
  const repo = parseRepoName(ctx.params[0]!, ctx.params[1]!);
  if (repo === null) throw lfsError('LFS_ERR_BAD_PATH', 'Not a valid repository name');
  return repo;
}

/** An optional JSON object body: empty means `{}`. */
function parseOptions(body: Buffer): Record<string, unknown> {
  if (body.length === 0) return {};
  const v = parseJson(body);
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw lfsError('LFS_ERR_BAD_REQUEST', 'The body must be a JSON object');
  return v as Record<string, unknown>;
}

function flag(options: Record<string, unknown>, name: string, fallback: boolean): boolean {
  const v = options[name];
  if (v === undefined) return fallback;
  if (typeof v !== 'boolean') throw lfsError('LFS_ERR_BAD_REQUEST', `${name} must be true or false`);
  return v;
}

/**
 * Answers a started job: by default when it ends, with its final report (200); with `"wait": false`
 * at once, 202 with the job and a Location for its progress. The job does not depend on this
 * request: a client that hangs up leaves it running, and its result stays readable by id.
 */
async function answer(ctx: RequestContext, repo: RepoName, job: Job, wait: boolean): Promise<void> {
  const href = `/${repo.org}/${repo.repo}/objects/jobs/${job.id}`;
  if (!wait) {
    sendJson(ctx, 202, { ...job.view(), href }, { Location: href });
    return;
  }
  const report = await job.done;
  sendJson(ctx, 200, { ...report, job: job.id });
}

/**
 * The maintenance endpoints (issue 6). The spec names these paths' purpose only; behaviour and
 * permissions are ours (design §3): retain needs push (what a pusher may upload, a pusher may
 * stop referencing; bytes go only when no repository references them and never within the grace),
 * dedupe and compress need admin (they rewrite storage), audit needs pull (it only reads; any
 * reader may check their data), and quarantining what it finds needs admin.
 */
export function registerMaintenanceRoutes(http: HttpServer, deps: MaintenanceRoutesDeps): void {
  const { access, maintenance } = deps;
  const token = (ctx: RequestContext): string | null => tokenFromAuthorization(ctx.header('authorization'));

  http.route('post', '/:org/:repo/objects/retain', 'retain', async (ctx) => {
    const body = collectBody(ctx, RETAIN_BODY_CAP);
    const repo = repoOf(ctx);
    const options = parseOptions(await body);
    await access.authorize(token(ctx), repo, 'push', ctx);
    const list = options.oids;
    if (!Array.isArray(list)) throw lfsError('LFS_ERR_BAD_REQUEST', 'oids must be a list of object ids (empty means none is referenced)');
    const keep = new Set<Oid>();
    for (const v of list) {
      const oid = parseOid(v);
      if (oid === null) throw lfsError('LFS_ERR_BAD_REQUEST', `Not an object id: ${JSON.stringify(v).slice(0, 80)}`);
      keep.add(oid);
    }
    await answer(ctx, repo, maintenance.retain(repo, keep, flag(options, 'dry_run', false)), flag(options, 'wait', true));
  });

  http.route('post', '/:org/:repo/objects/dedupe', 'dedupe', async (ctx) => {
    const body = collectBody(ctx, SMALL_BODY_CAP);
    const repo = repoOf(ctx);
    const options = parseOptions(await body);
    await access.authorize(token(ctx), repo, 'admin', ctx);
    await answer(ctx, repo, maintenance.dedupe(repo), flag(options, 'wait', true));
  });

  http.route('post', '/:org/:repo/objects/compress', 'compress', async (ctx) => {
    const body = collectBody(ctx, SMALL_BODY_CAP);
    const repo = repoOf(ctx);
    const options = parseOptions(await body);
    await access.authorize(token(ctx), repo, 'admin', ctx);
    await answer(ctx, repo, maintenance.compress(repo, flag(options, 'dry_run', false)), flag(options, 'wait', true));
  });

  http.route('post', '/:org/:repo/objects/audit', 'audit', async (ctx) => {
    const body = collectBody(ctx, SMALL_BODY_CAP);
    const repo = repoOf(ctx);
    const options = parseOptions(await body);
    const grant = await access.authorize(token(ctx), repo, 'pull', ctx);
    // Quarantine needs admin; `"quarantine": false` asks an admin's audit to only report.
    const quarantine = grant.permissions.admin && !grant.anonymous && flag(options, 'quarantine', true);
    await answer(ctx, repo, maintenance.audit(repo, quarantine), flag(options, 'wait', true));
  });

  // Import reads a folder on the server, so it needs admin, and the folder is only ever named
  // relative to SVC_IMPORT_DIR (MaintenanceService.import resolves and confines it).
  http.route('post', '/:org/:repo/objects/import', 'import', async (ctx) => {
    const body = collectBody(ctx, SMALL_BODY_CAP);
    const repo = repoOf(ctx);
    const options = parseOptions(await body);
    await access.authorize(token(ctx), repo, 'admin', ctx);
    const layout = parseImportLayout(options.layout);
    if (layout === null) throw lfsError('LFS_ERR_BAD_REQUEST', `layout must be one of ${Object.keys(IMPORT_LAYOUTS).join(', ')}`);
    const source = options.source ?? '';
    if (typeof source !== 'string' || source.length > 1024) throw lfsError('LFS_ERR_BAD_REQUEST', 'source must be a folder name relative to SVC_IMPORT_DIR');
    const job = await maintenance.import(repo, layout, source, flag(options, 'dry_run', false));
    await answer(ctx, repo, job, flag(options, 'wait', true));
  });

  http.route('get', '/:org/:repo/objects/jobs/:id', 'job', async (ctx) => {
    const repo = repoOf(ctx);
    const id = ctx.params[2]!;
    await access.authorize(token(ctx), repo, 'pull', ctx);
    const job = /^[A-Za-z0-9_-]{1,64}$/.test(id) ? maintenance.job(repo, id) : null;
    if (job === null) throw lfsError('LFS_ERR_NOT_FOUND', 'No such job for this repository');
    sendJson(ctx, 200, job, { 'Cache-Control': 'no-store' });
  });
}

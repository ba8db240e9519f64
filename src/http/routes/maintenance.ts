import { lfsError } from '../../errors/errors.js';
import { parseOid, type Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { AccessService } from '../../service/access-service.js';
import { SERVER_WIDE, type Job, type JobDetail } from '../../service/maintenance/job-runner.js';
import type { MaintenanceService } from '../../service/maintenance/maintenance-service.js';
import { IMPORT_LAYOUTS, parseImportLayout } from '../../store/foreign-layout.js';
import { tokenFromAuthorization } from '../auth.js';
import type { RequestContext } from '../context.js';
import { sendJson } from '../respond.js';
import type { GuardedCall, Permission, RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';
import { repoOf } from './path-params.js';

export interface MaintenanceRoutesDeps {
  readonly access: AccessService;
  readonly maintenance: MaintenanceService;
}

/** An optional JSON object body: empty means `{}`. */
async function optionsOf(call: GuardedCall): Promise<Record<string, unknown>> {
  const v = await call.json();
  if (v === undefined) return {};
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
async function answer(ctx: RequestContext, repo: RepoName | null, job: Job, wait: boolean): Promise<void> {
  const href = `/${repo === null ? SERVER_WIDE : `${repo.org}/${repo.repo}`}/objects/jobs/${job.id}`;
  if (!wait) {
    sendJson(ctx, 202, { ...job.view(), href }, { Location: href });
    return;
  }
  const report = await job.done;
  // A cancelled job also answers with its report (how far it got); state and outcome tell it apart.
  const v = job.view();
  sendJson(ctx, 200, { ...report, job: job.id, state: v.state, outcome: v.outcome });
}

/** Stopping a job needs what starting it needed, and at least push: a reader may not stop others' audits. */
function cancelNeeds(job: JobDetail): Permission {
  if (job.kind === 'retain') return 'push';
  if (job.kind === 'audit') return job.dry_run ? 'push' : 'admin';
  if (job.kind === 'import') return 'server_admin';
  return 'admin';
}

/**
 * The maintenance endpoints (docs/maintenance.md). Their permissions
 * are in ROUTES (route-policy.ts): every job needs push at least;
 * retain needs push (what a pusher may upload, a pusher may stop referencing; bytes go only when no
 * repository references them and never within the grace), audit push (admin to quarantine what it
 * finds), dedupe, compress, rekey and encrypt admin (they rewrite storage other repositories share),
 * import a server administrator (it reads SVC_IMPORT_DIR, staged for every repository), and so does
 * rewrap (every repository's data keys; its job is under /-/objects/jobs). Job list and show need pull.
 */
export function registerMaintenanceRoutes(http: HttpServer, guard: RouteGuard, deps: MaintenanceRoutesDeps): void {
  const { access, maintenance } = deps;
  const token = (ctx: RequestContext): string | null => tokenFromAuthorization(ctx.header('authorization'));

  guard.route(http, 'retain', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    const options = await optionsOf(call);
    const list = options.oids;
    if (!Array.isArray(list)) throw lfsError('LFS_ERR_BAD_REQUEST', 'oids must be a list of object ids (empty means none is referenced)');
    const keep = new Set<Oid>();
    for (const v of list) {
      const oid = parseOid(v);
      if (oid === null) throw lfsError('LFS_ERR_BAD_REQUEST', `Not an object id: ${JSON.stringify(v).slice(0, 80)}`);
      keep.add(oid);
    }
    await answer(ctx, repo, await maintenance.retain(repo, keep, flag(options, 'dry_run', false)), flag(options, 'wait', true));
  });

  guard.route(http, 'dedupe', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    const options = await optionsOf(call);
    await answer(ctx, repo, await maintenance.dedupe(repo), flag(options, 'wait', true));
  });

  guard.route(http, 'compress', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    const options = await optionsOf(call);
    await answer(ctx, repo, await maintenance.compress(repo, flag(options, 'dry_run', false)), flag(options, 'wait', true));
  });

  guard.route(http, 'audit', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    const options = await optionsOf(call);
    // Read-only unless asked (as restic's `check`): quarantining what it finds needs admin, and
    // asking for it without admin is refused rather than silently run read-only.
    const quarantine = flag(options, 'quarantine', false);
    if (quarantine) await call.authorize(repo, 'admin');
    await answer(ctx, repo, await maintenance.audit(repo, quarantine), flag(options, 'wait', true));
  });

  guard.route(http, 'rekey', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    const options = await optionsOf(call);
    await answer(ctx, repo, await maintenance.reencrypt('rekey', repo), flag(options, 'wait', true));
  });

  guard.route(http, 'encrypt', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    const options = await optionsOf(call);
    await answer(ctx, repo, await maintenance.reencrypt('encrypt', repo), flag(options, 'wait', true));
  });

  // Import reads a folder on the server, so it needs a server administrator, and the folder is only
  // ever named relative to SVC_IMPORT_DIR (MaintenanceService.import resolves and confines it).
  guard.route(http, 'import', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    const options = await optionsOf(call);
    const layout = parseImportLayout(options.layout);
    if (layout === null) throw lfsError('LFS_ERR_BAD_REQUEST', `layout must be one of ${Object.keys(IMPORT_LAYOUTS).join(', ')}`);
    const source = options.source ?? '';
    if (typeof source !== 'string' || source.length > 1024) throw lfsError('LFS_ERR_BAD_REQUEST', 'source must be a folder name relative to SVC_IMPORT_DIR');
    const job = await maintenance.import(repo, layout, source, flag(options, 'dry_run', false));
    await answer(ctx, repo, job, flag(options, 'wait', true));
  });

  guard.route(http, 'rewrap', async (ctx, call) => {
    await guard.serverAdmin(ctx);
    call.admit();
    const options = await optionsOf(call);
    await answer(ctx, null, await maintenance.rewrap(flag(options, 'sweep', false)), flag(options, 'wait', true));
  });

  /** The server-wide job named in the path (the caller was checked); 404 for an unknown id or a repository's job. */
  const serverJobOf = async (ctx: RequestContext): Promise<JobDetail> => {
    const id = ctx.params[0]!;
    const job = /^[A-Za-z0-9_-]{1,64}$/.test(id) ? await maintenance.serverJob(id) : null;
    if (job === null) throw lfsError('LFS_ERR_NOT_FOUND', 'No such server-wide job');
    return job;
  };

  guard.route(http, 'server_job_list', async (ctx) => {
    await guard.serverAdmin(ctx);
    sendJson(ctx, 200, { jobs: await maintenance.serverJobs() }, { 'Cache-Control': 'no-store' });
  });

  guard.route(http, 'server_job', async (ctx) => {
    await guard.serverAdmin(ctx);
    sendJson(ctx, 200, await serverJobOf(ctx), { 'Cache-Control': 'no-store' });
  });

  guard.route(http, 'server_job_cancel', async (ctx, call) => {
    await guard.serverAdmin(ctx);
    call.admit();
    await optionsOf(call);
    const job = await serverJobOf(ctx);
    const after = (await maintenance.cancelServerJob(job.id))!;
    sendJson(ctx, after.finished_at === null ? 202 : 200, after, { 'Cache-Control': 'no-store' });
  });

  /** The job named in the path, for a caller with pull; 404 for an unknown id or another repository's job. */
  const jobOf = async (ctx: RequestContext): Promise<{ repo: RepoName; job: JobDetail }> => {
    const repo = repoOf(ctx);
    const id = ctx.params[2]!;
    await access.authorize(token(ctx), repo, 'pull', ctx);
    const job = /^[A-Za-z0-9_-]{1,64}$/.test(id) ? await maintenance.job(repo, id) : null;
    if (job === null) throw lfsError('LFS_ERR_NOT_FOUND', 'No such job for this repository');
    return { repo, job };
  };

  guard.route(http, 'job_list', async (ctx) => {
    const repo = repoOf(ctx);
    await access.authorize(token(ctx), repo, 'pull', ctx);
    sendJson(ctx, 200, { jobs: await maintenance.jobsOf(repo) }, { 'Cache-Control': 'no-store' });
  });

  guard.route(http, 'job', async (ctx) => {
    const { job } = await jobOf(ctx);
    sendJson(ctx, 200, job, { 'Cache-Control': 'no-store' });
  });

  // 202 while the job is still on its way to the next object boundary; 200 once it is final
  // (a job that had already finished is left as it was).
  guard.route(http, 'job_cancel', async (ctx, call) => {
    const repo = repoOf(ctx);
    await call.authorize(repo);
    await optionsOf(call);
    const { job } = await jobOf(ctx);
    await call.authorize(repo, cancelNeeds(job));
    const after = (await maintenance.cancel(repo, job.id))!;
    sendJson(ctx, after.finished_at === null ? 202 : 200, after, { 'Cache-Control': 'no-store' });
  });
}

import { lfsError } from '../errors/errors.js';
import { MAX_BATCH_OBJECTS } from '../protocol/batch.js';
import { MAX_LOCK_PATH_BYTES } from '../protocol/locks.js';
import { isJsonRequestType } from '../protocol/media-types.js';
import type { RepoName } from '../protocol/repo-name.js';
import { CHALLENGE, type AccessService, type Grant } from '../service/access-service.js';
import type { DashboardUser, SessionService } from '../service/session-service.js';
import { tokenFromAuthorization } from './auth.js';
import type { RequestContext } from './context.js';
import { HeldBody, PRE_AUTH_BYTES, jsonTooDeep, refuseBody, parseJson } from './request-body.js';
import type { HttpServer } from './server.js';

/**
 * Who may call a route, weakest first:
 * - anyone: no credentials looked at (probes, the dashboard's page and sign-in, whose token is the body);
 * - pull: read the repository; anonymous callers too when it is public;
 * - push, admin: the forge's permission on the repository;
 * - server_admin: who may run this server, exactly whom the dashboard admits (a forge site admin,
 *   or an admin of SVC_ADMIN_REPO: SessionService.adminOf decides), by token or dashboard session.
 */
export type Permission = 'anyone' | 'pull' | 'push' | 'admin' | 'server_admin';
const RANK: Record<Permission, number> = { anyone: 0, pull: 1, push: 2, admin: 3, server_admin: 4 };

export type RouteBody =
  | { readonly kind: 'none' }
  /** A JSON body of at most `cap` bytes and `depth` levels of nesting; empty too unless `required`. */
  | { readonly kind: 'json'; readonly cap: number; readonly depth: number; readonly required?: boolean }
  /** An object's bytes, streamed to the store (BodyPump); any size the access settings allow. */
  | { readonly kind: 'stream' };

export interface RoutePolicy {
  readonly method: 'get' | 'head' | 'post' | 'put' | 'patch' | 'options' | 'del';
  readonly pattern: string;
  /** Checked before more than PRE_AUTH_BYTES of the body is read; a handler may ask more once it knows the body. */
  readonly needs: Permission;
  readonly body: RouteBody;
  /**
   * Changes state: a present Origin must be this server's own, and a JSON body route requires a
   * JSON Content-Type even when the body is empty. A page on another site can make a browser send,
   * without a CORS preflight, only a GET/HEAD/POST with a text/plain, form or multipart type (and
   * the browser adds the credentials it holds for this host: the repository page's Basic ones);
   * every other method or type needs a preflight, which this server never grants. PUT and DELETE
   * routes are thus out of a foreign page's reach already; their Origin is checked all the same.
   */
  readonly changesState: boolean;
}

const KiB = 1024;
export { PRE_AUTH_BYTES };
/** A JSON option object of a maintenance job or a dashboard call: a few flags and names. */
const OPTIONS = { kind: 'json', cap: 16 * KiB, depth: 1 } as const;
/** A lock request: a path (MAX_LOCK_PATH_BYTES, each byte as long as a 6-character JSON escape), a ref object. */
const LOCK_BODY = { kind: 'json', cap: 6 * MAX_LOCK_PATH_BYTES + 8 * KiB, depth: 2 } as const;
const NONE = { kind: 'none' } as const;

/** An oid as a JSON list item: 64 hex digits, quotes, a comma and a space. */
const RETAIN_OID_BYTES = 68;
/**
 * Retain names every object the repository still references, in one list: 500 000 oids (32 MiB), far
 * past any Git LFS repository we know of (the largest seen hold tens of thousands), so that no real
 * one is turned away, and small enough that a pusher cannot make the server parse more than that.
 */
export const RETAIN_MAX_OIDS = 500_000;
/**
 * A batch names at most MAX_BATCH_OBJECTS objects of ~80 bytes each ({"oid":"…64…","size":…}): 160
 * an object leaves room for spacing, and 64 KiB for the ref name and the transfer list (≈ 220 KiB).
 */
const BATCH_CAP = MAX_BATCH_OBJECTS * 160 + 64 * KiB;

/**
 * Every route, in one table: who may call it, what body it takes and whether it changes state.
 * RouteGuard applies it before the handler runs and before any body is read past PRE_AUTH_BYTES.
 */
export const ROUTES = {
  health: { method: 'get', pattern: '/health', needs: 'anyone', body: NONE, changesState: false },
  ready: { method: 'get', pattern: '/ready', needs: 'anyone', body: NONE, changesState: false },
  metrics: { method: 'get', pattern: '/metrics', needs: 'anyone', body: NONE, changesState: false },

  // Batch: pull before the body; an upload batch needs push, asked once the body names the operation.
  batch: { method: 'post', pattern: '/:org/:repo/objects/batch', needs: 'pull', body: { kind: 'json', cap: BATCH_CAP, depth: 3, required: true }, changesState: true },
  // Push, or a verify link signed for this object (presigned uploads; ObjectRoutes).
  verify: { method: 'post', pattern: '/:org/:repo/objects/verify', needs: 'push', body: { kind: 'json', cap: 4 * KiB, depth: 1, required: true }, changesState: true },
  upload: { method: 'put', pattern: '/:org/:repo/objects/:oid', needs: 'push', body: { kind: 'stream' }, changesState: true },
  download_head: { method: 'head', pattern: '/:org/:repo/objects/:oid', needs: 'pull', body: NONE, changesState: false },
  download: { method: 'get', pattern: '/:org/:repo/objects/:oid', needs: 'pull', body: NONE, changesState: false },
  // Resumable uploads (tus 1.0.0, docs/resumable-uploads.md): push on the repository, as a PUT. The
  // OPTIONS answer only names the protocol's version and limits, the same for everyone.
  tus_options: { method: 'options', pattern: '/:org/:repo/objects/tus/:oid', needs: 'anyone', body: NONE, changesState: false },
  tus_head: { method: 'head', pattern: '/:org/:repo/objects/tus/:oid', needs: 'push', body: NONE, changesState: false },
  tus_patch: { method: 'patch', pattern: '/:org/:repo/objects/tus/:oid', needs: 'push', body: { kind: 'stream' }, changesState: true },
  tus_delete: { method: 'del', pattern: '/:org/:repo/objects/tus/:oid', needs: 'push', body: NONE, changesState: true },

  lock_create: { method: 'post', pattern: '/:org/:repo/locks', needs: 'push', body: LOCK_BODY, changesState: true },
  lock_list: { method: 'get', pattern: '/:org/:repo/locks', needs: 'pull', body: NONE, changesState: false },
  lock_verify: { method: 'post', pattern: '/:org/:repo/locks/verify', needs: 'push', body: LOCK_BODY, changesState: true },
  // Someone else's lock (force) needs admin: LockService decides once the body says force.
  lock_unlock: { method: 'post', pattern: '/:org/:repo/locks/:id/unlock', needs: 'push', body: LOCK_BODY, changesState: true },

  // Every job needs push at least; admin for what rewrites bytes other repositories share.
  retain: { method: 'post', pattern: '/:org/:repo/objects/retain', needs: 'push', body: { kind: 'json', cap: RETAIN_MAX_OIDS * RETAIN_OID_BYTES, depth: 2 }, changesState: true },
  dedupe: { method: 'post', pattern: '/:org/:repo/objects/dedupe', needs: 'admin', body: OPTIONS, changesState: true },
  compress: { method: 'post', pattern: '/:org/:repo/objects/compress', needs: 'admin', body: OPTIONS, changesState: true },
  // Read-only audit: push; with "quarantine": true, admin (asked once the body says so).
  audit: { method: 'post', pattern: '/:org/:repo/objects/audit', needs: 'push', body: OPTIONS, changesState: true },
  // Reads SVC_IMPORT_DIR, which holds what is staged for every repository: an operator's act.
  import: { method: 'post', pattern: '/:org/:repo/objects/import', needs: 'server_admin', body: OPTIONS, changesState: true },
  job_list: { method: 'get', pattern: '/:org/:repo/objects/jobs', needs: 'pull', body: NONE, changesState: false },
  job: { method: 'get', pattern: '/:org/:repo/objects/jobs/:id', needs: 'pull', body: NONE, changesState: false },
  // Stopping a job needs what starting it needed (asked once the job is found), and push at least.
  job_cancel: { method: 'post', pattern: '/:org/:repo/objects/jobs/:id/cancel', needs: 'push', body: OPTIONS, changesState: true },
  // Re-encrypt objects under fresh data keys: admin, as compress (they rewrite storage other repositories share).
  rekey: { method: 'post', pattern: '/:org/:repo/objects/rekey', needs: 'admin', body: OPTIONS, changesState: true },
  encrypt: { method: 'post', pattern: '/:org/:repo/objects/encrypt', needs: 'admin', body: OPTIONS, changesState: true },
  // Jobs of the whole server, under /-/objects: every data key of every repository, as the key file
  // covers the whole server. A server administrator's act; their progress and cancel likewise.
  rewrap: { method: 'post', pattern: '/-/objects/rewrap', needs: 'server_admin', body: OPTIONS, changesState: true },
  server_job_list: { method: 'get', pattern: '/-/objects/jobs', needs: 'server_admin', body: NONE, changesState: false },
  server_job: { method: 'get', pattern: '/-/objects/jobs/:id', needs: 'server_admin', body: NONE, changesState: false },
  server_job_cancel: { method: 'post', pattern: '/-/objects/jobs/:id/cancel', needs: 'server_admin', body: OPTIONS, changesState: true },

  repo_stats: { method: 'get', pattern: '/:org/:repo/objects/stats', needs: 'pull', body: NONE, changesState: false },
  repo_page: { method: 'get', pattern: '/:org/:repo', needs: 'pull', body: NONE, changesState: false },

  // Cache mode (docs/cache.md): the same paths, registered instead of the routes above. The upstream
  // authorizes batches and lock calls (the client's Authorization is relayed to it); a transfer is
  // admitted by the signed link a batch handed out, checked before any body is read past PRE_AUTH_BYTES.
  cache_batch: { method: 'post', pattern: '/:org/:repo/objects/batch', needs: 'anyone', body: { kind: 'json', cap: BATCH_CAP, depth: 3, required: true }, changesState: true },
  cache_upload: { method: 'put', pattern: '/:org/:repo/objects/:oid', needs: 'anyone', body: { kind: 'stream' }, changesState: true },
  cache_download: { method: 'get', pattern: '/:org/:repo/objects/:oid', needs: 'anyone', body: NONE, changesState: false },
  cache_download_head: { method: 'head', pattern: '/:org/:repo/objects/:oid', needs: 'anyone', body: NONE, changesState: false },
  // The repository's hit ratio: shown to whom the upstream lets read the repository (asked with a batch).
  cache_repo_stats: { method: 'get', pattern: '/:org/:repo/objects/stats', needs: 'anyone', body: NONE, changesState: false },
  cache_repo_page: { method: 'get', pattern: '/:org/:repo', needs: 'anyone', body: NONE, changesState: false },
  cache_lock_create: { method: 'post', pattern: '/:org/:repo/locks', needs: 'anyone', body: LOCK_BODY, changesState: true },
  cache_lock_list: { method: 'get', pattern: '/:org/:repo/locks', needs: 'anyone', body: NONE, changesState: false },
  cache_lock_verify: { method: 'post', pattern: '/:org/:repo/locks/verify', needs: 'anyone', body: LOCK_BODY, changesState: true },
  cache_lock_unlock: { method: 'post', pattern: '/:org/:repo/locks/:id/unlock', needs: 'anyone', body: LOCK_BODY, changesState: true },

  dashboard_redirect: { method: 'get', pattern: '/-', needs: 'anyone', body: NONE, changesState: false },
  // The page shows the sign-in form to anyone, the dashboard to a signed-in server admin.
  dashboard: { method: 'get', pattern: '/-/', needs: 'anyone', body: NONE, changesState: false },
  dashboard_jobs: { method: 'get', pattern: '/-/jobs', needs: 'server_admin', body: NONE, changesState: false },
  // Sign-in: the token is the body, so the whole body is the pre-authorization allowance.
  session_create: { method: 'post', pattern: '/-/api/session', needs: 'anyone', body: { kind: 'json', cap: PRE_AUTH_BYTES, depth: 1, required: true }, changesState: true },
  session_show: { method: 'get', pattern: '/-/api/session', needs: 'anyone', body: NONE, changesState: false },
  session_delete: { method: 'del', pattern: '/-/api/session', needs: 'anyone', body: NONE, changesState: true },
  overview: { method: 'get', pattern: '/-/api/overview', needs: 'server_admin', body: NONE, changesState: false },
  access_show: { method: 'get', pattern: '/-/api/access', needs: 'server_admin', body: NONE, changesState: false },
  access_save: { method: 'put', pattern: '/-/api/access', needs: 'server_admin', body: { kind: 'json', cap: 64 * KiB, depth: 2, required: true }, changesState: true },
  access_reset: { method: 'del', pattern: '/-/api/access', needs: 'server_admin', body: NONE, changesState: true },
} as const satisfies Record<string, RoutePolicy>;

export type RouteName = keyof typeof ROUTES;

/**
 * Cache mode serves the routes named cache_* in place of REPLACED_ON_A_CACHE (same paths), those of
 * ON_EVERY_NODE as any node does, and refuses every other route with LFS_ERR_NOT_ON_A_CACHE (jobs
 * over an index a cache never fills, tus): a route added later is refused on a cache until said.
 */
export const REPLACED_ON_A_CACHE = ['batch', 'verify', 'upload', 'download_head', 'download', 'lock_create', 'lock_list', 'lock_verify', 'lock_unlock', 'repo_stats', 'repo_page'] as const satisfies readonly RouteName[];
const ON_EVERY_NODE: ReadonlySet<RouteName> = new Set<RouteName>(['health', 'ready', 'metrics', 'dashboard_redirect', 'dashboard', 'session_create', 'session_show', 'session_delete', 'overview', 'access_show', 'access_save', 'access_reset']);
export const NOT_ON_A_CACHE: readonly RouteName[] = (Object.keys(ROUTES) as RouteName[]).filter(
  (n) => !n.startsWith('cache_') && !ON_EVERY_NODE.has(n) && !(REPLACED_ON_A_CACHE as readonly RouteName[]).includes(n),
);

/** The routes a node serves: its own, or (cache mode) the cache's and those every node has. */
export function servedRoutes(cacheMode: boolean): RouteName[] {
  const names = Object.keys(ROUTES) as RouteName[];
  const replaced = new Set<RouteName>(cacheMode ? REPLACED_ON_A_CACHE : []);
  return names.filter((n) => (n.startsWith('cache_') ? cacheMode : !replaced.has(n)));
}

export interface RouteGuardDeps {
  readonly access: AccessService;
  readonly sessions: SessionService;
  /** The public base URL (SVC_BASE_URL, or derived once listening): its origin is the only one trusted. */
  readonly baseUrl: () => string;
}

/** One request as the guard let it through: its authorization, then its body. */
export class GuardedCall {
  readonly ctx: RequestContext;
  readonly name: RouteName;
  readonly policy: RoutePolicy;
  readonly #guard: RouteGuard;
  readonly #body: HeldBody | null;

  constructor(ctx: RequestContext, name: RouteName, policy: RoutePolicy, guard: RouteGuard, body: HeldBody | null) {
    this.ctx = ctx;
    this.name = name;
    this.policy = policy;
    this.#guard = guard;
    this.#body = body;
  }

  /** The caller's token, or null; 401 for one no forge could accept. */
  token(): string | null {
    return tokenFromAuthorization(this.ctx.header('authorization'));
  }

  /**
   * Authorizes the caller on `repo` for the table's permission, or a stronger `need` known from the
   * path or the body (never a weaker one), then lets the rest of the body in.
   */
  async authorize(repo: RepoName, need: Permission = this.policy.needs): Promise<Grant | DashboardUser | null> {
    if (RANK[need] < RANK[this.policy.needs]) throw new Error(`route ${this.name} needs ${this.policy.needs}, not ${need}`);
    let who: Grant | DashboardUser | null = null;
    if (need === 'server_admin') who = await this.#guard.serverAdmin(this.ctx);
    else if (need !== 'anyone') who = await this.#guard.access.authorize(this.token(), repo, need, this.ctx);
    this.#body?.release();
    return who;
  }

  /**
   * Lets the body in on another proof the handler checked itself: a verify link signed for one
   * object, a dashboard session, or none for the routes whose table entry says anyone.
   */
  admit(): void {
    this.#body?.release();
  }

  /** The JSON body, undefined when empty; 400 for nesting deeper than the route allows. Only once admitted. */
  async json(): Promise<unknown> {
    if (this.#body === null || this.policy.body.kind !== 'json') throw new Error(`route ${this.name} takes no JSON body`);
    const bytes = await this.#body.read();
    if (bytes.length === 0 && this.policy.body.required !== true) return undefined;
    const depth = this.policy.body.depth;
    if (jsonTooDeep(bytes, depth)) throw lfsError('LFS_ERR_BAD_JSON', `The body nests deeper than this request needs (${depth} level${depth === 1 ? '' : 's'})`);
    return parseJson(bytes);
  }
}

/**
 * Registers every route from ROUTES and applies its policy before the handler: a state-changing
 * call must carry a JSON Content-Type (JSON body routes) and no foreign Origin, a Content-Length
 * over the route's cap is refused at once, and the body is held at PRE_AUTH_BYTES until the
 * handler authorized the caller (GuardedCall.authorize or admit). Refusals go out with the body
 * unread, and the connection closes after the answer (respond.ts says how).
 */
export class RouteGuard {
  readonly access: AccessService;
  readonly #sessions: SessionService;
  readonly #baseUrl: () => string;

  constructor(deps: RouteGuardDeps) {
    this.access = deps.access;
    this.#sessions = deps.sessions;
    this.#baseUrl = deps.baseUrl;
  }

  /** This server's origin, the only one whose pages may change state here. */
  origin(): string {
    return new URL(this.#baseUrl()).origin;
  }

  /**
   * A present Origin must be ours, whatever the credentials (cached Basic credentials and cookies
   * are ambient); `required`: an absent one is refused too (a cookie session's state change).
   */
  checkOrigin(ctx: RequestContext, required: boolean): void {
    const o = ctx.header('origin');
    if (o === '' ? required : o !== this.origin()) {
      throw lfsError('LFS_ERR_ORIGIN_MISMATCH', `Origin ${o === '' ? '(none)' : `"${o.slice(0, 200)}"`} does not match this server's ${this.origin()}; set SVC_BASE_URL to the address the server is reached at`);
    }
  }

  /** The server administrator behind the request's token (SessionService.adminOf decides), or throws 401/403. */
  async serverAdmin(ctx: RequestContext): Promise<DashboardUser> {
    const token = tokenFromAuthorization(ctx.header('authorization'));
    if (token === null) throw lfsError('LFS_ERR_AUTH_REQUIRED', undefined, CHALLENGE);
    return this.#sessions.adminOf(token, ctx.signal);
  }

  route(http: HttpServer, name: RouteName, handler: (ctx: RequestContext, call: GuardedCall) => void | Promise<void>): void {
    const policy: RoutePolicy = ROUTES[name];
    http.route(policy.method, policy.pattern, name, (ctx) => {
      // Held first: uWS hands the body only to an onData registered before the handler returns.
      const body = policy.body.kind === 'json' ? new HeldBody(ctx, policy.body.cap, PRE_AUTH_BYTES) : null;
      if (policy.body.kind === 'none') refuseBody(ctx);
      try {
        this.#admit(ctx, policy);
      } catch (e) {
        // The upload's pump is not attached yet: its body is refused as a route without one's is.
        if (policy.body.kind === 'stream') refuseBody(ctx);
        throw e;
      }
      return handler(ctx, new GuardedCall(ctx, name, policy, this, body));
    });
  }

  #admit(ctx: RequestContext, policy: RoutePolicy): void {
    if (!policy.changesState) return;
    this.checkOrigin(ctx, false);
    if (policy.body.kind !== 'json') return;
    if (!isJsonRequestType(ctx.header('content-type'))) throw lfsError('LFS_ERR_BAD_MEDIA_TYPE', 'Content-Type must be application/vnd.git-lfs+json or application/json, also for an empty body');
    const length = ctx.header('content-length');
    if (length !== '' && Number(length) > policy.body.cap) throw lfsError('LFS_ERR_BODY_TOO_LARGE', `Request body is larger than ${policy.body.cap} bytes`);
  }
}

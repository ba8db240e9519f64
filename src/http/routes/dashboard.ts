import { lfsError } from '../../errors/errors.js';
import type { Session, SessionService, DashboardUser } from '../../service/session-service.js';
import type { SettingsService } from '../../service/settings-service.js';
import type { Overview, StatsService } from '../../service/stats-service.js';
import type { CacheFigures } from '../../cache/cache-metrics.js';
import { tokenFromAuthorization, usableToken } from '../auth.js';
import type { RequestContext } from '../context.js';
import { send } from '../respond.js';
import type { RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';

/** The page templates, imported at the first page asked for: of no use to a server at rest. */
const pages = (): Promise<typeof import('../pages/dashboard-page.js')> => import('../pages/dashboard-page.js');

/** Name of the session cookie; scoped to /-/ so no other route ever receives it. */
export const SESSION_COOKIE = 'stowage_session';
/** Where the dashboard lives (the start-up line prints it); its session cookie is scoped to it. */
export const DASHBOARD_PATH = '/-/';
const COOKIE_PATH = DASHBOARD_PATH;
const JSON_TYPE = 'application/json; charset=utf-8';
const NO_STORE = { 'Cache-Control': 'no-store' };
/** Dashboard 401s carry no Basic challenge: a browser must not pop up a password prompt. */
const NO_CHALLENGE = {};

export interface DashboardDeps {
  readonly sessions: SessionService;
  readonly settings: SettingsService;
  readonly stats: StatsService;
  /** Cache mode's figures (overview's `cache`), null on a node that is not a cache; a cache has no jobs. */
  readonly cacheFigures: (() => CacheFigures) | null;
  /** The public base URL (SVC_BASE_URL, or derived once listening): decides the cookie's Secure flag. */
  readonly baseUrl: () => string;
}

/** The value of one cookie from a Cookie header, or ''. */
export function cookieValue(header: string, name: string): string {
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return '';
}

function json(ctx: RequestContext, status: number, value: unknown, headers: Record<string, string> = {}): void {
  send(ctx, status, JSON.stringify(value), { ...NO_STORE, ...headers }, JSON_TYPE);
}

function userView(user: DashboardUser, expiresAt: number | null): object {
  return { signed_in: true, user: { id: user.id, name: user.name }, via: user.via, expires_at: expiresAt === null ? null : new Date(expiresAt).toISOString() };
}

/**
 * The dashboard: the page at /-/ and its JSON API under /-/api/. Every API call needs a signed-in
 * session (cookie) or a server administrator's token (Authorization header). A state-changing call
 * made with the cookie must come from our own origin (the Origin header, which browsers send on
 * every non-GET fetch, must equal SVC_BASE_URL's origin; RouteGuard.checkOrigin); SameSite=Strict is
 * the second fence. The route guard refuses a foreign Origin and a non-JSON body type on every
 * state-changing call before this code runs (ROUTES).
 */
export function registerDashboardRoutes(http: HttpServer, guard: RouteGuard, deps: DashboardDeps): void {
  const { sessions, settings, stats } = deps;
  const secure = (): boolean => deps.baseUrl().startsWith('https:');

  const sessionOf = async (ctx: RequestContext): Promise<{ id: string; session: Session | null }> => {
    const id = cookieValue(ctx.header('cookie'), SESSION_COOKIE);
    return { id, session: id === '' ? null : await sessions.find(id) };
  };

  /** The admin making this call: by token when one is sent, else by the session cookie. */
  const requireAdmin = async (ctx: RequestContext, changesState: boolean): Promise<DashboardUser> => {
    const token = tokenFromAuthorization(ctx.header('authorization'), NO_CHALLENGE);
    if (token !== null) {
      if (changesState) guard.checkOrigin(ctx, false);
      return sessions.adminOf(token, ctx.signal);
    }
    const { session } = await sessionOf(ctx);
    if (session === null) throw lfsError('LFS_ERR_SESSION_REQUIRED');
    if (changesState) guard.checkOrigin(ctx, true);
    return session.user;
  };

  const overview = async (): Promise<Overview & { cache: CacheFigures | null }> => ({ ...(await stats.overview()), cache: deps.cacheFigures?.() ?? null });

  const cookie = (value: string, maxAge: number): string =>
    `${SESSION_COOKIE}=${value}; Path=${COOKIE_PATH}; Max-Age=${maxAge}; HttpOnly; SameSite=Strict${secure() ? '; Secure' : ''}`;

  guard.route(http, 'dashboard_redirect', (ctx) => send(ctx, 308, '', { Location: '/-/' }, null));

  guard.route(http, 'dashboard', async (ctx) => {
    const { session } = await sessionOf(ctx);
    if (session !== null) await settings.refresh();
    const { renderDashboard, renderSignIn } = await pages();
    const page = session === null ? renderSignIn() : renderDashboard(session, await overview(), settings.view(), await stats.repositoryList());
    send(ctx, 200, page.html, page.headers, 'text/html; charset=utf-8');
  });

  // The page's jobs section alone, which its script fetches while a job runs (a small poll instead
  // of reloading the whole page).
  if (deps.cacheFigures === null) {
    guard.route(http, 'dashboard_jobs', async (ctx) => {
      await requireAdmin(ctx, false);
      send(ctx, 200, (await pages()).renderJobs(await stats.jobs()), { ...NO_STORE, 'X-Content-Type-Options': 'nosniff' }, 'text/html; charset=utf-8');
    });
  }

  // Login CSRF (a foreign page signing a browser in as someone else) is refused by the guard's
  // Origin check. The token is the body: the whole of it (PRE_AUTH_BYTES at most) is read first.
  guard.route(http, 'session_create', async (ctx, call) => {
    call.admit();
    const parsed = (await call.json()) as { token?: unknown } | null | undefined;
    const token = parsed?.token;
    if (typeof token !== 'string' || token.trim() === '' || token.length > 4096) throw lfsError('LFS_ERR_BAD_REQUEST', 'Body must be {"token": "<forge token>"}');
    const { id, session } = await sessions.signIn(usableToken(token.trim(), NO_CHALLENGE), ctx.signal);
    json(ctx, 201, userView(session.user, session.expiresAt), { 'Set-Cookie': cookie(id, sessions.ttlSeconds) });
  });

  guard.route(http, 'session_show', async (ctx) => {
    const { session } = await sessionOf(ctx);
    if (session === null) throw lfsError('LFS_ERR_SESSION_REQUIRED', 'Not signed in');
    json(ctx, 200, userView(session.user, session.expiresAt));
  });

  guard.route(http, 'session_delete', async (ctx) => {
    const { id, session } = await sessionOf(ctx);
    if (session !== null) guard.checkOrigin(ctx, true);
    await sessions.signOut(id);
    send(ctx, 204, '', { ...NO_STORE, 'Set-Cookie': cookie('', 0) }, null);
  });

  guard.route(http, 'overview', async (ctx) => {
    await requireAdmin(ctx, false);
    json(ctx, 200, await overview());
  });

  guard.route(http, 'access_show', async (ctx) => {
    await requireAdmin(ctx, false);
    await settings.refresh();
    json(ctx, 200, settings.view());
  });

  guard.route(http, 'access_save', async (ctx, call) => {
    const user = await requireAdmin(ctx, true);
    call.admit();
    json(ctx, 200, await settings.save(await call.json(), user.name));
  });

  guard.route(http, 'access_reset', async (ctx) => {
    await requireAdmin(ctx, true);
    json(ctx, 200, await settings.reset());
  });
}

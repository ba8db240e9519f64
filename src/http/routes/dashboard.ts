import { lfsError } from '../../errors/errors.js';
import type { Session, SessionService, DashboardUser } from '../../service/session-service.js';
import type { SettingsService } from '../../service/settings-service.js';
import type { StatsService } from '../../service/stats-service.js';
import { tokenFromAuthorization, usableToken } from '../auth.js';
import type { RequestContext } from '../context.js';
import { collectBody, parseJson } from '../request-body.js';
import { send } from '../respond.js';
import type { HttpServer } from '../server.js';

/** The page templates, imported at the first page asked for: of no use to a server at rest. */
const pages = (): Promise<typeof import('../pages/dashboard-page.js')> => import('../pages/dashboard-page.js');

/** Name of the session cookie; scoped to /-/ so no other route ever receives it. */
export const SESSION_COOKIE = 'stowage_session';
/** Where the dashboard lives (the start-up line prints it); its session cookie is scoped to it. */
export const DASHBOARD_PATH = '/-/';
const COOKIE_PATH = DASHBOARD_PATH;
const BODY_CAP = 64 * 1024;
const JSON_TYPE = 'application/json; charset=utf-8';
const NO_STORE = { 'Cache-Control': 'no-store' };
/** Dashboard 401s carry no Basic challenge: a browser must not pop up a password prompt. */
const NO_CHALLENGE = {};

export interface DashboardDeps {
  readonly sessions: SessionService;
  readonly settings: SettingsService;
  readonly stats: StatsService;
  /** The public base URL (SVC_BASE_URL, or derived once listening): its origin is the only one trusted. */
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
 * session (cookie) or a forge admin's token (Authorization header). A state-changing call made with
 * the cookie must come from our own origin (the Origin header, which browsers send on every
 * non-GET fetch, must equal SVC_BASE_URL's origin); SameSite=Strict is the second fence.
 */
export function registerDashboardRoutes(http: HttpServer, deps: DashboardDeps): void {
  const { sessions, settings, stats } = deps;
  const secure = (): boolean => deps.baseUrl().startsWith('https:');
  const origin = (): string => new URL(deps.baseUrl()).origin;

  /** A present Origin must be ours, whatever the credentials (cached Basic credentials are ambient too). */
  const checkOrigin = (ctx: RequestContext, required: boolean): void => {
    const o = ctx.header('origin');
    if (o === '' ? required : o !== origin()) {
      throw lfsError('LFS_ERR_ORIGIN_MISMATCH', `Origin ${o === '' ? '(none)' : `"${o}"`} does not match this server's ${origin()}; set SVC_BASE_URL to the address the dashboard is opened at`);
    }
  };

  const sessionOf = async (ctx: RequestContext): Promise<{ id: string; session: Session | null }> => {
    const id = cookieValue(ctx.header('cookie'), SESSION_COOKIE);
    return { id, session: id === '' ? null : await sessions.find(id) };
  };

  /** The admin making this call: by token when one is sent, else by the session cookie. */
  const requireAdmin = async (ctx: RequestContext, changesState: boolean): Promise<DashboardUser> => {
    const token = tokenFromAuthorization(ctx.header('authorization'), NO_CHALLENGE);
    if (token !== null) {
      if (changesState) checkOrigin(ctx, false);
      return sessions.adminOf(token, ctx.signal);
    }
    const { session } = await sessionOf(ctx);
    if (session === null) throw lfsError('LFS_ERR_SESSION_REQUIRED');
    if (changesState) checkOrigin(ctx, true);
    return session.user;
  };

  const cookie = (value: string, maxAge: number): string =>
    `${SESSION_COOKIE}=${value}; Path=${COOKIE_PATH}; Max-Age=${maxAge}; HttpOnly; SameSite=Strict${secure() ? '; Secure' : ''}`;

  http.route('get', '/-', 'dashboard_redirect', (ctx) => send(ctx, 308, '', { Location: '/-/' }, null));

  http.route('get', '/-/', 'dashboard', async (ctx) => {
    const { session } = await sessionOf(ctx);
    if (session !== null) await settings.refresh();
    const { renderDashboard, renderSignIn } = await pages();
    const page = session === null ? renderSignIn() : renderDashboard(session, await stats.overview(), settings.view(), await stats.repositoryList());
    send(ctx, 200, page.html, page.headers, 'text/html; charset=utf-8');
  });

  // The page's jobs section alone, which its script fetches while a job runs (a small poll instead
  // of reloading the whole page).
  http.route('get', '/-/jobs', 'dashboard_jobs', async (ctx) => {
    await requireAdmin(ctx, false);
    send(ctx, 200, (await pages()).renderJobs(await stats.jobs()), { ...NO_STORE, 'X-Content-Type-Options': 'nosniff' }, 'text/html; charset=utf-8');
  });

  http.route('post', '/-/api/session', 'session_create', async (ctx) => {
    const body = collectBody(ctx, BODY_CAP);
    // Login CSRF: a foreign page must not sign a browser in as someone else.
    checkOrigin(ctx, false);
    const parsed = parseJson(await body) as { token?: unknown } | null;
    const token = parsed?.token;
    if (typeof token !== 'string' || token.trim() === '' || token.length > 4096) throw lfsError('LFS_ERR_BAD_REQUEST', 'Body must be {"token": "<forge token>"}');
    const { id, session } = await sessions.signIn(usableToken(token.trim(), NO_CHALLENGE), ctx.signal);
    json(ctx, 201, userView(session.user, session.expiresAt), { 'Set-Cookie': cookie(id, sessions.ttlSeconds) });
  });

  http.route('get', '/-/api/session', 'session_show', async (ctx) => {
    const { session } = await sessionOf(ctx);
    if (session === null) throw lfsError('LFS_ERR_SESSION_REQUIRED', 'Not signed in');
    json(ctx, 200, userView(session.user, session.expiresAt));
  });

  http.route('del', '/-/api/session', 'session_delete', async (ctx) => {
    const { id, session } = await sessionOf(ctx);
    if (session !== null) checkOrigin(ctx, true);
    await sessions.signOut(id);
    send(ctx, 204, '', { ...NO_STORE, 'Set-Cookie': cookie('', 0) }, null);
  });

  http.route('get', '/-/api/overview', 'overview', async (ctx) => {
    await requireAdmin(ctx, false);
    json(ctx, 200, await stats.overview());
  });

  http.route('get', '/-/api/access', 'access_show', async (ctx) => {
    await requireAdmin(ctx, false);
    await settings.refresh();
    json(ctx, 200, settings.view());
  });

  http.route('put', '/-/api/access', 'access_save', async (ctx) => {
    const body = collectBody(ctx, BODY_CAP);
    const user = await requireAdmin(ctx, true);
    json(ctx, 200, await settings.save(parseJson(await body), user.name));
  });

  http.route('del', '/-/api/access', 'access_reset', async (ctx) => {
    await requireAdmin(ctx, true);
    json(ctx, 200, await settings.reset());
  });
}

import { lfsError } from '../../errors/errors.js';
import { parseRepoName, type RepoName } from '../../protocol/repo-name.js';
import type { AccessService } from '../../service/access-service.js';
import type { StatsService } from '../../service/stats-service.js';
import { tokenFromAuthorization } from '../auth.js';
import type { RequestContext } from '../context.js';
import { send } from '../respond.js';
import type { RouteGuard } from '../route-policy.js';
import type { HttpServer } from '../server.js';

export interface RepoPageDeps {
  readonly access: AccessService;
  readonly stats: StatsService;
}

function repoOf(ctx: RequestContext): RepoName {
  const repo = parseRepoName(ctx.params[0]!, ctx.params[1]!);
  if (repo === null) throw lfsError('LFS_ERR_BAD_PATH', 'Not a valid repository name');
  return repo;
}

/**
 * The repository page and its JSON twin. Both need pull (docs/behaviour.md, "Who may do what") and are drawn from one
 * RepoStats object. A browser without credentials gets the Basic challenge and asks for the token
 * (any user name, the token as password — the same credentials git uses).
 */
export function registerRepoPageRoutes(http: HttpServer, guard: RouteGuard, deps: RepoPageDeps): void {
  const { access, stats } = deps;

  guard.route(http, 'repo_stats', async (ctx) => {
    const repo = repoOf(ctx);
    await access.authorize(tokenFromAuthorization(ctx.header('authorization')), repo, 'pull', ctx);
    send(ctx, 200, JSON.stringify(await stats.repoStats(repo)), { 'Cache-Control': 'no-store' }, 'application/json; charset=utf-8');
  });

  guard.route(http, 'repo_page', async (ctx) => {
    const repo = repoOf(ctx);
    await access.authorize(tokenFromAuthorization(ctx.header('authorization')), repo, 'pull', ctx);
    // Imported at the first page asked for: the templates are of no use to a server at rest.
    const { renderRepoPage } = await import('../pages/repo-page.js');
    const page = renderRepoPage(await stats.repoStats(repo));
    send(ctx, 200, page.html, page.headers, 'text/html; charset=utf-8');
  });
}

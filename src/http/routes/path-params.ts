import { lfsError } from '../../errors/errors.js';
import { acceptsLfsJson } from '../../protocol/media-types.js';
import { parseOid, type Oid } from '../../protocol/oid.js';
import { parseRepoName, type RepoName } from '../../protocol/repo-name.js';
import type { RequestContext } from '../context.js';

/** The repository a `/{org}/{repo}/…` route names; a name that is not one is the client's error. */
export function repoOf(ctx: RequestContext): RepoName {
  const repo = parseRepoName(ctx.params[0]!, ctx.params[1]!);
  if (repo === null) throw lfsError('LFS_ERR_BAD_PATH', 'Not a valid repository name');
  return repo;
}

export function oidOf(value: string): Oid {
  const oid = parseOid(value);
  if (oid === null) throw lfsError('LFS_ERR_BAD_PATH', 'Not a valid object id (64 lowercase hex digits)');
  return oid;
}

/** The Content-Type was checked by the route guard (ROUTES): the answer's type is left. */
export function checkAccept(ctx: RequestContext): void {
  if (!acceptsLfsJson(ctx.header('accept'))) throw lfsError('LFS_ERR_NOT_ACCEPTABLE');
}

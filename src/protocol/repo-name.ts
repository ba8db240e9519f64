/**
 * Repository names from the URL ({org}/{repo}). Only forge-safe characters are accepted, so a name
 * can never carry a path separator, a percent escape or a dot segment into a file path or forge URL.
 */
export interface RepoName {
  readonly org: string;
  readonly repo: string;
  /** "org/repo" as the client spelt it (less a trailing `.git`): for the forge and for messages. */
  readonly name: string;
  /** The canonical "org/repo" (repoKey): the key of everything kept per repository, whatever the spelling. */
  readonly key: string;
}

// GitHub, GitLab and Gitea names all fit this (and none ends in `.git`).
const SEGMENT_RE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$/;

export function parseRepoSegment(value: string): string | null {
  if (!SEGMENT_RE.test(value) || value === '.' || value === '..' || value.endsWith('.lock')) return null;
  return value;
}

/** The canonical key: ASCII lower case (forges compare names case-insensitively), no `.git`; migration 007-repo-names does the same in SQL. */
export function repoKey(name: string): string {
  const lower = name.toLowerCase();
  return lower.endsWith('.git') ? lower.slice(0, -4) : lower;
}

export function parseRepoName(org: string, repo: string): RepoName | null {
  const o = parseRepoSegment(org);
  // Clone URLs carry `.git` and no forge allows a name ending in it, so repoKey stays idempotent.
  const r = parseRepoSegment(/\.git$/i.test(repo) ? repo.slice(0, -4) : repo);
  if (o === null || r === null || /\.git$/i.test(r)) return null;
  const name = `${o}/${r}`;
  return { org: o, repo: r, name, key: name.toLowerCase() };
}

/**
 * Repository names from the URL ({org}/{repo}). Only forge-safe characters are accepted, so a name
 * can never carry a path separator, a percent escape or a dot segment into a file path or forge URL.
 */
export interface RepoName {
  readonly org: string;
  readonly repo: string;
  /** "org/repo", the key used in the index. */
  readonly key: string;
}

// GitHub, GitLab and Gitea names all fit this; `.git` suffixes are stripped by clients before lfs.url.
const SEGMENT_RE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$/;

export function parseRepoSegment(value: string): string | null {
  if (!SEGMENT_RE.test(value) || value === '.' || value === '..' || value.endsWith('.lock')) return null;
  return value;
}

export function parseRepoName(org: string, repo: string): RepoName | null {
  const o = parseRepoSegment(org);
  const r = parseRepoSegment(repo);
  if (o === null || r === null) return null;
  return { org: o, repo: r, key: `${o}/${r}` };
}

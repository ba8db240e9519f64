/** Media types of the Git LFS API (https://github.com/git-lfs/git-lfs/blob/main/docs/api/batch.md). */
export const LFS_JSON = 'application/vnd.git-lfs+json';

/** True when a Content-Type names the LFS media type or JSON, parameters or not (git-lfs sends `; charset=utf-8` except on verify: https://github.com/git-lfs/git-lfs/blob/v3.3.0/tq/verify.go). */
export function isJsonRequestType(contentType: string): boolean {
  const essence = contentType.split(';', 1)[0]!.trim().toLowerCase();
  return essence === LFS_JSON || essence === 'application/json';
}

/** True when an Accept header is absent or allows the LFS media type. */
export function acceptsLfsJson(accept: string): boolean {
  if (accept === '') return true;
  return accept.split(',').some((part) => {
    const t = part.split(';', 1)[0]!.trim().toLowerCase();
    return t === LFS_JSON || t === 'application/json' || t === '*/*' || t === 'application/*';
  });
}

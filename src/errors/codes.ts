/**
 * Every error this server answers with: a stable code, its HTTP status and the message a client sees.
 * Match on `code`, never on message text. Retired codes are never reused.
 * README "Errors" lists every code; test/unit/errors/codes.test.ts fails if the two drift apart.
 */
export const ERROR_CODES = {
  LFS_ERR_BAD_JSON: { status: 400, message: 'Request body is not valid JSON' },
  LFS_ERR_BAD_REQUEST: { status: 422, message: 'Invalid request' },
  LFS_ERR_BAD_MEDIA_TYPE: { status: 415, message: 'Content-Type must be application/vnd.git-lfs+json' },
  LFS_ERR_NOT_ACCEPTABLE: { status: 406, message: 'Accept must allow application/vnd.git-lfs+json' },
  LFS_ERR_BODY_TOO_LARGE: { status: 413, message: 'Request body is too large' },
  LFS_ERR_BATCH_TOO_LARGE: { status: 413, message: 'Too many objects in one batch' },
  LFS_ERR_BAD_PATH: { status: 404, message: 'Not found' },
  LFS_ERR_NOT_FOUND: { status: 404, message: 'Not found' },
  LFS_ERR_METHOD_NOT_ALLOWED: { status: 405, message: 'Method not allowed' },
  LFS_ERR_OBJECT_NOT_FOUND: { status: 404, message: 'Object does not exist' },
  LFS_ERR_SIZE_MISMATCH: { status: 422, message: 'Object size does not match' },
  LFS_ERR_DIGEST_MISMATCH: { status: 422, message: 'Object content does not match its oid' },
  LFS_ERR_RANGE_NOT_SATISFIABLE: { status: 416, message: 'Range not satisfiable' },
  LFS_ERR_AUTH_REQUIRED: { status: 401, message: 'Credentials needed' },
  LFS_ERR_AUTH_REJECTED: { status: 401, message: 'The forge did not accept these credentials' },
  LFS_ERR_REPO_NOT_FOUND: { status: 404, message: 'Repository not found, or this token cannot see it' },
  LFS_ERR_FORBIDDEN_WRITE: { status: 403, message: 'This token may read but not write this repository' },
  LFS_ERR_FORBIDDEN: { status: 403, message: 'This token may not do that' },
  LFS_ERR_FORGE_UNREACHABLE: { status: 502, message: 'The forge could not be reached to check these credentials' },
  LFS_ERR_FORGE_RATE_LIMITED: { status: 503, message: 'The forge is rate-limiting this server; retry later' },
  LFS_ERR_LOOKUP_BUDGET_SPENT: { status: 503, message: 'Too many credential lookups right now; retry later' },
  LFS_ERR_SHUTTING_DOWN: { status: 503, message: 'Server is shutting down; retry shortly' },
  LFS_ERR_UPLOAD_ABORTED: { status: 400, message: 'Upload ended before the whole object arrived' },
  LFS_ERR_NOT_READY: { status: 503, message: 'Storage is not writable' },
  LFS_ERR_STORAGE_FULL: { status: 507, message: 'The store has no room for this object' },
  LFS_ERR_INTERNAL: { status: 500, message: 'Internal server error' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

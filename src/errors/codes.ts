/**
 * Every error this server answers with: a stable code, its HTTP status and the message a client sees.
 * Match on `code`, never on message text. Retired codes are never reused.
 * The error table of docs/behaviour.md lists every code; test/unit/docs-parity.test.ts fails if the two
 * drift apart.
 */
export const ERROR_CODES = {
  LFS_ERR_BAD_JSON: { status: 400, message: 'Request body is not valid JSON' },
  LFS_ERR_BAD_REQUEST: { status: 422, message: 'Invalid request' },
  LFS_ERR_BAD_MEDIA_TYPE: { status: 415, message: 'Content-Type must be application/vnd.git-lfs+json' },
  LFS_ERR_NOT_ACCEPTABLE: { status: 406, message: 'Accept must allow application/vnd.git-lfs+json' },
  LFS_ERR_BODY_TOO_LARGE: { status: 413, message: 'Request body is too large' },
  // HTTP framing the server cannot read one way only (RFC 9112 §6.3); the connection is closed after it.
  LFS_ERR_BAD_FRAMING: { status: 400, message: 'Conflicting or unsupported message framing (RFC 9112 §6.3)' },
  // The HTTP layer (uWS) takes no Content-Length of 1e9 or more; chunked bodies have no such limit.
  LFS_ERR_LENGTH_TOO_LARGE: { status: 413, message: 'A Content-Length of 1000000000 bytes or more cannot be read here; send the body with Transfer-Encoding: chunked' },
  LFS_ERR_BATCH_TOO_LARGE: { status: 413, message: 'Too many objects in one batch' },
  LFS_ERR_TRANSFER_UNSUPPORTED: { status: 422, message: 'None of the offered transfer adapters is spoken here; this server speaks "basic"' },
  LFS_ERR_BAD_PATH: { status: 404, message: 'Not found' },
  LFS_ERR_NOT_FOUND: { status: 404, message: 'Not found' },
  LFS_ERR_METHOD_NOT_ALLOWED: { status: 405, message: 'Method not allowed' },
  LFS_ERR_OBJECT_NOT_FOUND: { status: 404, message: 'Object does not exist' },
  LFS_ERR_SIZE_MISMATCH: { status: 422, message: 'Object size does not match' },
  LFS_ERR_DIGEST_MISMATCH: { status: 422, message: 'Object content does not match its oid' },
  LFS_ERR_RANGE_NOT_SATISFIABLE: { status: 416, message: 'Range not satisfiable' },
  LFS_ERR_AUTH_REQUIRED: { status: 401, message: 'Credentials needed' },
  LFS_ERR_AUTH_REJECTED: { status: 401, message: 'The forge did not accept these credentials' },
  // Refused before any forge call: a token with a space, a control or a non-ASCII character cannot
  // go into the forge request's header, and is no forge's token anyway.
  LFS_ERR_AUTH_MALFORMED: { status: 401, message: 'These credentials cannot be a forge token: they hold spaces, control or non-ASCII characters' },
  // GET /metrics with an Authorization header that is not `Bearer SVC_METRICS_TOKEN` (none configured included).
  LFS_ERR_METRICS_TOKEN_REJECTED: { status: 401, message: 'This is not the metrics token of this server (SVC_METRICS_TOKEN); scrape without credentials for the series open to all' },
  LFS_ERR_REPO_NOT_FOUND: { status: 404, message: 'Repository not found, or this token cannot see it' },
  LFS_ERR_FORBIDDEN_WRITE: { status: 403, message: 'This token may read but not write this repository' },
  LFS_ERR_FORBIDDEN: { status: 403, message: 'This token may not do that' },
  // 503 like the rate-limit case, but without Retry-After: the client sees a server-side outage
  // (docs/behaviour.md, Access); the cause label forge_unreachable keeps the two apart in metrics.
  LFS_ERR_FORGE_UNREACHABLE: { status: 503, message: 'The forge could not be reached to check these credentials' },
  LFS_ERR_FORGE_RATE_LIMITED: { status: 503, message: 'The forge is rate-limiting this server; retry later' },
  LFS_ERR_LOOKUP_BUDGET_SPENT: { status: 503, message: 'Too many credential lookups right now; retry later' },
  LFS_ERR_SHUTTING_DOWN: { status: 503, message: 'Server is shutting down; retry shortly' },
  // Resumable uploads (tus): a PATCH whose Upload-Offset is not the offset this server holds; the answer's Upload-Offset says which.
  LFS_ERR_UPLOAD_OFFSET_MISMATCH: { status: 409, message: 'Upload-Offset does not match the bytes this server holds of the upload' },
  // Resumable uploads on several nodes: another node appends to this upload now (docs/resumable-uploads.md).
  LFS_ERR_UPLOAD_BUSY: { status: 423, message: 'Another request appends to this upload now; ask where it stands (HEAD) and resume' },
  LFS_ERR_TUS_VERSION: { status: 412, message: 'Tus-Resumable must be 1.0.0, the tus version spoken here' },
  LFS_ERR_UPLOAD_ABORTED: { status: 400, message: 'Upload ended before the whole object arrived' },
  LFS_ERR_NOT_READY: { status: 503, message: 'Storage is not writable' },
  LFS_ERR_STORAGE_FULL: { status: 507, message: 'The store has no room for this object' },
  LFS_ERR_LOCK_BAD_PATH: { status: 422, message: 'Lock path must be a file path relative to the repository root' },
  LFS_ERR_LOCK_EXISTS: { status: 409, message: 'This path is already locked' },
  LFS_ERR_LOCK_NOT_FOUND: { status: 404, message: 'Lock not found' },
  LFS_ERR_LOCK_NO_IDENTITY: { status: 403, message: 'This token names no forge user (an app or installation token), so it cannot hold locks' },
  LFS_ERR_LOCK_NOT_OWNER: { status: 403, message: 'This lock belongs to someone else; releasing it needs force' },
  LFS_ERR_LOCK_FORCE_NEEDS_ADMIN: { status: 403, message: "Releasing someone else's lock needs admin permission on the repository" },
  LFS_ERR_OBJECT_DAMAGED: { status: 500, message: 'The stored object is damaged' },
  LFS_ERR_INTERNAL: { status: 500, message: 'Internal server error' },
  // Dashboard, repository page and access settings.
  LFS_ERR_SESSION_REQUIRED: { status: 401, message: "Sign in to the dashboard, or send a forge administrator's token" },
  LFS_ERR_NOT_ADMIN: { status: 403, message: 'Only an administrator of the forge, or of the repository named by SVC_ADMIN_REPO, may use the dashboard' },
  LFS_ERR_ORIGIN_MISMATCH: { status: 403, message: "Origin does not match this server's SVC_BASE_URL" },
  LFS_ERR_REPO_NOT_ALLOWED: { status: 403, message: 'This server does not serve this repository' },
  LFS_ERR_OBJECT_TOO_LARGE: { status: 413, message: 'Object is larger than this server accepts' },
  // Cache mode (docs/cache.md).
  LFS_ERR_LINK_REFUSED: { status: 403, message: 'This link was not issued to these credentials for this repository, or has expired; run the batch again' },
  LFS_ERR_UPSTREAM_UNREACHABLE: { status: 502, message: 'The upstream LFS server could not be reached' },
  LFS_ERR_UPSTREAM_FAILED: { status: 502, message: 'The upstream LFS server failed this transfer' },
  LFS_ERR_NOT_ON_A_CACHE: { status: 501, message: 'This node is a cache: repository maintenance, jobs, imports and resumable uploads belong to the upstream LFS server' },
  LFS_ERR_QUOTA_EXCEEDED: { status: 507, message: "The repository's storage quota is reached" },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

import { createHash, createHmac } from 'node:crypto';

export interface S3Credentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken: string | null;
}

/** Payload hash value that tells S3 the body is not part of the signature (the server hashes it itself). */
export const UNSIGNED_PAYLOAD = 'UNSIGNED-PAYLOAD';
export const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
/** Longest lifetime S3 accepts for a presigned URL (X-Amz-Expires ≤ 604800). */
export const MAX_PRESIGN_SECONDS = 604_800;

/** RFC 3986 encoding as SigV4 demands it: everything but unreserved characters is %XX-encoded. */
export function uriEncode(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** Encodes every path segment, keeping the slashes (S3 signs the path encoded exactly once). */
export function encodePath(path: string): string {
  return path.split('/').map(uriEncode).join('/');
}

function hmac(key: string | Buffer, data: string): Buffer {
  return createHmac('sha256', key).update(data, 'utf8').digest();
}

function sha256Hex(data: string): string {
  return createHash('sha256').update(data, 'utf8').digest('hex');
}

function stamps(now: Date): { amzDate: string; day: string } {
  const amzDate = now.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
  return { amzDate, day: amzDate.slice(0, 8) };
}

function canonicalQuery(query: ReadonlyArray<readonly [string, string]>): string {
  return query
    .map(([k, v]) => [uriEncode(k), uriEncode(v)] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

/** What one request to sign consists of. `path` is the raw (unencoded) path, starting with '/'. */
export interface SignInput {
  readonly method: string;
  readonly host: string;
  readonly path: string;
  readonly query: ReadonlyArray<readonly [string, string]>;
  readonly headers: Readonly<Record<string, string>>;
}

export interface SignContext {
  readonly credentials: S3Credentials;
  readonly region: string;
}

/** SigV4 (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html). */
function signature(ctx: SignContext, input: SignInput, query: ReadonlyArray<readonly [string, string]>, headers: Record<string, string>, payloadHash: string, now: Date): { signedHeaders: string; signature: string; scope: string } {
  const { amzDate, day } = stamps(now);
  const names = Object.keys(headers).sort();
  const canonicalHeaders = names.map((n) => `${n}:${headers[n]!.trim().replace(/\s+/g, ' ')}\n`).join('');
  const signedHeaders = names.join(';');
  const canonicalRequest = [input.method, encodePath(input.path), canonicalQuery(query), canonicalHeaders, signedHeaders, payloadHash].join('\n');
  const scope = `${day}/${ctx.region}/s3/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256Hex(canonicalRequest)].join('\n');
  const key = hmac(hmac(hmac(hmac(`AWS4${ctx.credentials.secretAccessKey}`, day), ctx.region), 's3'), 'aws4_request');
  return { signedHeaders, signature: createHmac('sha256', key).update(stringToSign, 'utf8').digest('hex'), scope };
}

function lowerHeaders(input: SignInput): Record<string, string> {
  const out: Record<string, string> = { host: input.host };
  for (const [k, v] of Object.entries(input.headers)) out[k.toLowerCase()] = v;
  return out;
}

export function signHeaders(ctx: SignContext, input: SignInput, payloadHash: string, now = new Date()): Record<string, string> {
  const { amzDate } = stamps(now);
  const headers = lowerHeaders(input);
  headers['x-amz-date'] = amzDate;
  headers['x-amz-content-sha256'] = payloadHash;
  if (ctx.credentials.sessionToken !== null) headers['x-amz-security-token'] = ctx.credentials.sessionToken;
  const s = signature(ctx, input, input.query, headers, payloadHash, now);
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${ctx.credentials.accessKeyId}/${s.scope}, SignedHeaders=${s.signedHeaders}, Signature=${s.signature}`;
  delete headers.host;
  return headers;
}

/** A presigned URL (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html). */
export function presign(ctx: SignContext, input: SignInput, origin: string, expiresIn: number, now = new Date()): string {
  const { amzDate, day } = stamps(now);
  const headers = lowerHeaders(input);
  const query: (readonly [string, string])[] = [
    ...input.query,
    ['X-Amz-Algorithm', 'AWS4-HMAC-SHA256'],
    ['X-Amz-Credential', `${ctx.credentials.accessKeyId}/${day}/${ctx.region}/s3/aws4_request`],
    ['X-Amz-Date', amzDate],
    ['X-Amz-Expires', String(Math.min(Math.max(1, Math.floor(expiresIn)), MAX_PRESIGN_SECONDS))],
    ['X-Amz-SignedHeaders', Object.keys(headers).sort().join(';')],
  ];
  if (ctx.credentials.sessionToken !== null) query.push(['X-Amz-Security-Token', ctx.credentials.sessionToken]);
  const s = signature(ctx, input, query, headers, UNSIGNED_PAYLOAD, now);
  query.push(['X-Amz-Signature', s.signature]);
  return `${origin}${encodePath(input.path)}?${canonicalQuery(query)}`;
}

import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import AjvModule from 'ajv-draft-04';
import { request, type Dispatcher } from 'undici';

const here = dirname(fileURLToPath(import.meta.url));
/**
 * The official Git LFS JSON schemas, vendored in test/fixtures/git-lfs-schemas. tsc does not copy
 * JSON into dist/, so they are read from the source tree: dist/test/helpers → the repository root.
 */
export const SCHEMA_DIR = resolve(here, '../../../test/fixtures/git-lfs-schemas');

// CJS default export under NodeNext interop.
const Ajv = (AjvModule as unknown as { default: typeof AjvModule }).default ?? AjvModule;
const ajv = new (Ajv as unknown as new (o: object) => import('ajv').default)({ allErrors: true });
/** Validates `value` against one of the official Git LFS schemas; returns the errors text or null. */
export function schemaErrors(schemaFile: string, value: unknown): string | null {
  const schema = JSON.parse(readFileSync(join(SCHEMA_DIR, schemaFile), 'utf8')) as object;
  const validate = ajv.getSchema(schemaFile) ?? (ajv.addSchema(schema, schemaFile), ajv.getSchema(schemaFile)!);
  return validate(value) ? null : ajv.errorsText(validate.errors);
}

export const LFS = 'application/vnd.git-lfs+json';

export function basic(token: string, user = 'git'): string {
  return `Basic ${Buffer.from(`${user}:${token}`).toString('base64')}`;
}

export interface Blob {
  readonly data: Buffer;
  readonly oid: string;
  readonly size: number;
}

export function blob(size: number): Blob {
  return blobOf(randomBytes(size));
}

export function blobOf(data: Buffer): Blob {
  return { data, oid: createHash('sha256').update(data).digest('hex'), size: data.length };
}

export interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
  json(): any;
}

/** One HTTP request, body fully read; `dispatcher` for another agent (one trusting a test CA). */
export async function http(
  method: string,
  url: string,
  opts: { headers?: Record<string, string>; body?: string | Buffer | AsyncIterable<Buffer>; dispatcher?: Dispatcher } = {},
): Promise<Reply> {
  const res = await request(url, { method: method as 'GET', headers: opts.headers, body: opts.body as Buffer, dispatcher: opts.dispatcher });
  const body = Buffer.from(await res.body.arrayBuffer());
  return {
    status: res.statusCode,
    headers: res.headers,
    body,
    json: () => JSON.parse(body.toString('utf8')),
  };
}

/** POST /{repo}/objects/batch as git-lfs sends it. */
export function batch(base: string, repo: string, token: string | null, operation: 'upload' | 'download', objects: { oid: string; size: number }[], extra: Record<string, unknown> = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': `${LFS}; charset=utf-8`, accept: LFS };
  if (token !== null) headers.authorization = basic(token);
  return http('POST', `${base}/${repo}/objects/batch`, {
    headers,
    body: JSON.stringify({ operation, objects, transfers: ['basic', 'lfs-standalone-file', 'ssh'], ref: { name: 'refs/heads/main' }, hash_algo: 'sha256', ...extra }),
  });
}

/** Uploads through the batch: batch → PUT with the action's headers → verify. Returns the PUT status. */
export async function push(base: string, repo: string, token: string, b: Blob): Promise<number> {
  const res = await batch(base, repo, token, 'upload', [{ oid: b.oid, size: b.size }]);
  if (res.status !== 200) return res.status;
  const obj = res.json().objects[0];
  if (!obj.actions) return 200; // already present
  const put = await http('PUT', obj.actions.upload.href, {
    headers: { authorization: basic(token), 'content-type': 'application/octet-stream', ...(obj.actions.upload.header ?? {}) },
    body: b.data,
  });
  if (put.status !== 200 || !obj.actions.verify) return put.status;
  const verify = await http('POST', obj.actions.verify.href, {
    headers: { authorization: basic(token), 'content-type': LFS, accept: LFS },
    body: JSON.stringify({ oid: b.oid, size: b.size }),
  });
  return verify.status;
}

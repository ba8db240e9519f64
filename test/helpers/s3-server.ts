import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import type { CredentialsProvider } from '../../src/store/s3/credentials/credentials-cache.js';
import { fixedCredentials } from '../../src/store/s3/credentials/static-source.js';

/**
 * A real S3-protocol server on loopback for the S3 store's tests: `@20minutes/s3rver`, the
 * maintained fork of s3rver. The original `s3rver` 3.7.1 accepts any SigV4 signature ("Signature
 * version 4 calculation is unimplemented" in its authentication middleware), so it could not catch a
 * signing bug; the fork recomputes SigV4 for Authorization headers and presigned query strings
 * (canonical request, signed headers, expiry) and answers 403 SignatureDoesNotMatch / AccessDenied.
 * It runs in its own process, so "the bucket is down" is a real stopped process and a refused
 * connection. It does not enforce x-amz-checksum-sha256, so the tests exercise the read-back-and-hash
 * promotion path.
 */
export interface S3Server {
  readonly endpoint: string;
  readonly port: number;
  readonly bucket: string;
  readonly dir: string;
  /** Environment for the Stowage server: SVC_STORE=s3 against this bucket. */
  env(extra?: Record<string, string>): Record<string, string>;
  /**
   * true: every request is answered 503 ServiceUnavailable (an overloaded or failing S3 front end)
   * until called with false. Takes effect for the next request, on open connections too.
   */
  unavailable(on: boolean): void;
  /** Stops the process (the bucket's files stay in `dir`). */
  stop(): Promise<void>;
}

/** The file whose presence makes the server answer 503 (in its directory, outside the bucket). */
const UNAVAILABLE_FLAG = '.answer-503';

/** s3rver's built-in account. */
export const S3_ACCESS_KEY = 'S3RVER';
export const S3_SECRET_KEY = 'S3RVER';

/** s3rver's account as the credentials provider the S3 client asks (tests that open the backend directly). */
export function s3rverCredentials(): CredentialsProvider {
  return fixedCredentials({ accessKeyId: S3_ACCESS_KEY, secretAccessKey: S3_SECRET_KEY, sessionToken: null });
}
const BUCKET = 'lfs-objects';

/** Starts the S3 server (port 0 = any free port; pass the old port and dir to restart it after an outage). */
export async function startS3Server(dir: string, port = 0): Promise<S3Server> {
  mkdirSync(dir, { recursive: true });
  // s3rver encrypts ListObjectsV2 continuation tokens with DES, which OpenSSL 3 keeps in its legacy
  // provider: without it every listing longer than one page answers 500 InternalError.
  const child: ChildProcess = spawn(process.execPath, ['--openssl-legacy-provider', fileURLToPath(import.meta.url), dir, String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  child.stderr!.on('data', (d: Buffer) => logs.push(d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const bound = await new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^listening (\d+)$/.exec(line);
      if (m) resolve(Number(m[1]));
    });
    void exited.then(() => reject(new Error(`s3 server exited before listening:\n${logs.join('')}`)));
  });
  const endpoint = `http://127.0.0.1:${bound}`;
  return {
    endpoint,
    port: bound,
    bucket: BUCKET,
    dir,
    env: (extra = {}) => ({
      SVC_STORE: 's3',
      SVC_S3_BUCKET: BUCKET,
      SVC_S3_ENDPOINT: endpoint,
      SVC_S3_REGION: 'us-east-1',
      SVC_S3_PATH_STYLE: 'true',
      SVC_S3_PREFIX: 'lfs',
      AWS_ACCESS_KEY_ID: S3_ACCESS_KEY,
      AWS_SECRET_ACCESS_KEY: S3_SECRET_KEY,
      ...extra,
    }),
    unavailable(on) {
      if (on) writeFileSync(join(dir, UNAVAILABLE_FLAG), '');
      else rmSync(join(dir, UNAVAILABLE_FLAG), { force: true });
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

// Run as a process: node s3-server.js DIR PORT → prints "listening PORT".
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const require = createRequire(import.meta.url);
  const S3rver = require('@20minutes/s3rver') as new (o: object) => { run(): Promise<{ port: number }>; middleware: S3Middleware[] };
  atomicPuts(require('@20minutes/s3rver/lib/stores/filesystem.js') as FilesystemStore);
  const server = new S3rver({
    address: '127.0.0.1',
    port: Number(process.argv[3] ?? 0),
    directory: process.argv[2],
    silent: true,
    allowMismatchedSignatures: false,
    configureBuckets: [{ name: BUCKET }],
  });
  // First in the chain, so s3rver's router (and its SigV4 check) has run when the error comes back.
  server.middleware.unshift(unavailableSwitch(join(process.argv[2]!, UNAVAILABLE_FLAG)), multipartUploadsExtension(join(process.argv[2]!, BUCKET, '._S3rver_uploads')), ifMatchExtension());
  const { port } = await server.run();
  process.stdout.write(`listening ${port}\n`);
}

/** 503 ServiceUnavailable for every request while `flag` exists, before s3rver sees it (S3's own answer when it sheds load). */
function unavailableSwitch(flag: string): S3Middleware {
  return async (ctx, next) => {
    if (!existsSync(flag)) return next();
    ctx.status = 503;
    ctx.type = 'application/xml';
    ctx.body = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ServiceUnavailable</Code><Message>Please reduce your request rate.</Message></Error>';
  };
}

/** s3rver's store class, as far as atomicPuts patches it. */
interface FilesystemStore {
  prototype: { putContent(objectPath: string, content: unknown): Promise<[number, string]> };
}

/**
 * S3 makes an object visible only once its PUT completed; s3rver writes the body straight to the
 * object's file, so a client that dies mid-PUT (a node SIGKILLed in the cluster test) leaves a
 * truncated object any HEAD finds. Here the body goes to a temporary file renamed into place when
 * complete, as S3 behaves.
 */
function atomicPuts(store: FilesystemStore): void {
  const put = store.prototype.putContent;
  let n = 0;
  store.prototype.putContent = async function (this: unknown, objectPath: string, content: unknown): Promise<[number, string]> {
    const partial = `${objectPath}.partial-${process.pid}-${++n}`;
    try {
      let result: [number, string];
      if (Buffer.isBuffer(content)) {
        // s3rver's own path for a Buffer resolves before the file is written.
        writeFileSync(partial, content);
        result = [content.length, createHash('md5').update(content).digest('hex')];
      } else result = await put.call(this, partial, content);
      renameSync(partial, objectPath);
      return result;
    } catch (e) {
      rmSync(partial, { force: true });
      throw e;
    }
  };
}

type S3Middleware = (ctx: S3Context, next: () => Promise<void>) => Promise<void>;
interface S3Context {
  method: string;
  path: string;
  headers: Record<string, string | undefined>;
  response: { get(name: string): string };
  query: Record<string, string | undefined>;
  status: number;
  type: string;
  body: unknown;
}

/**
 * The two multipart calls s3rver 4 lacks, answered from its own uploads folder (one folder per
 * upload id, holding `key`): AbortMultipartUpload (`DELETE key?uploadId=`, which s3rver refuses with
 * MethodNotAllowed) and ListMultipartUploads (`GET bucket?uploads`, NotImplemented there; Initiated
 * is the folder's mtime). They run only where s3rver's router threw after the signature check passed,
 * so a bad signature still gets s3rver's own 403.
 */
function multipartUploadsExtension(uploadsDir: string): S3Middleware {
  return async (ctx, next) => {
    try {
      await next();
    } catch (e) {
      const code = (e as { code?: string }).code;
      const id = ctx.query.uploadId;
      if (code === 'MethodNotAllowed' && ctx.method === 'DELETE' && id !== undefined && /^[0-9a-f]+$/.test(id)) {
        rmSync(join(uploadsDir, id), { recursive: true, force: true });
        ctx.status = 204;
        ctx.body = null;
        return;
      }
      if (code === 'NotImplemented' && ctx.method === 'GET' && 'uploads' in ctx.query && ctx.path.replace(/\/$/, '') === `/${BUCKET}`) {
        const prefix = ctx.query.prefix ?? '';
        let ids: string[] = [];
        try {
          ids = readdirSync(uploadsDir);
        } catch {
          // No upload was ever started.
        }
        const uploads = ids
          .map((uploadId) => ({ uploadId, key: readFileSync(join(uploadsDir, uploadId, 'key'), 'utf8'), at: statSync(join(uploadsDir, uploadId)).mtime }))
          .filter((u) => u.key.startsWith(prefix));
        const esc = (v: string): string => v.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
        ctx.type = 'application/xml';
        ctx.status = 200;
        ctx.body =
          `<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult><Bucket>${BUCKET}</Bucket><Prefix>${esc(prefix)}</Prefix><IsTruncated>false</IsTruncated>` +
          uploads.map((u) => `<Upload><Key>${esc(u.key)}</Key><UploadId>${u.uploadId}</UploadId><Initiated>${u.at.toISOString()}</Initiated></Upload>`).join('') +
          '</ListMultipartUploadsResult>';
        return;
      }
      throw e;
    }
  };
}

/**
 * `If-Match` on GET and HEAD, which s3rver ignores (AWS S3 and MinIO answer 412 PreconditionFailed
 * when the key's ETag differs): checked against the ETag s3rver itself sets on its answer, so the
 * signature check and the 404 for a missing key stay s3rver's own.
 */
function ifMatchExtension(): S3Middleware {
  return async (ctx, next) => {
    await next();
    const wanted = ctx.headers['if-match'];
    if (wanted === undefined || (ctx.method !== 'GET' && ctx.method !== 'HEAD') || (ctx.status !== 200 && ctx.status !== 206)) return;
    if (wanted.trim() === '*' || wanted.trim() === ctx.response.get('ETag')) return;
    (ctx.body as { destroy?: () => void } | null)?.destroy?.();
    ctx.status = 412;
    ctx.type = 'application/xml';
    ctx.body = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>';
  };
}

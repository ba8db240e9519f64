import t from 'tap';
import { ConfigError, loadConfig } from '../../src/config/load.js';

// SVC_STORE=s3 and its variables (issue 8): defaults and each validation message.
const creds = { AWS_ACCESS_KEY_ID: 'AKID', AWS_SECRET_ACCESS_KEY: 'secret' };
const s3 = { SVC_STORE: 's3', SVC_S3_BUCKET: 'lfs-objects', ...creds };

t.test('disk by default, no bucket', async (t) => {
  const c = loadConfig({});
  t.equal(c.store, 'disk');
  t.equal(c.s3, null);
});

t.test('s3 defaults', async (t) => {
  const c = loadConfig(s3);
  t.equal(c.store, 's3');
  t.same(c.s3, {
    bucket: 'lfs-objects',
    endpoint: 'https://s3.us-east-1.amazonaws.com',
    region: 'us-east-1',
    prefix: '',
    pathStyle: false,
    presign: false,
    presignTtl: 3600,
    credentials: { accessKeyId: 'AKID', secretAccessKey: 'secret', sessionToken: null },
  });
  t.ok(Object.isFrozen(c.s3!.credentials), 'frozen');
});

t.test('s3 settings', async (t) => {
  const c = loadConfig({ ...s3, SVC_S3_ENDPOINT: 'http://127.0.0.1:9000/', SVC_S3_REGION: 'eu-west-3', SVC_S3_PREFIX: '/lfs/prod/', SVC_S3_PATH_STYLE: 'true', SVC_S3_PRESIGN: 'yes', SVC_S3_PRESIGN_TTL: '2h', AWS_SESSION_TOKEN: 'tok' });
  t.equal(c.s3!.endpoint, 'http://127.0.0.1:9000');
  t.equal(c.s3!.region, 'eu-west-3');
  t.equal(c.s3!.prefix, 'lfs/prod/', 'slashes normalised, one trailing');
  t.equal(c.s3!.pathStyle, true);
  t.equal(c.s3!.presign, true);
  t.equal(c.s3!.presignTtl, 7200);
  t.equal(c.s3!.credentials.sessionToken, 'tok');
  t.equal(loadConfig({ ...s3, SVC_S3_REGION: 'eu-central-1' }).s3!.endpoint, 'https://s3.eu-central-1.amazonaws.com', 'endpoint follows the region');
});

t.test('validation messages', async (t) => {
  const cases: [Record<string, string>, string][] = [
    [{ SVC_STORE: 'nfs' }, 'SVC_STORE must be disk or s3, got "nfs"'],
    [{ SVC_STORE: 's3', ...creds }, 'SVC_S3_BUCKET is required when SVC_STORE=s3'],
    [{ ...s3, SVC_S3_BUCKET: 'Bad_Bucket' }, 'SVC_S3_BUCKET must be a bucket name (3-63 of a-z 0-9 . -), got "Bad_Bucket"'],
    [{ SVC_STORE: 's3', SVC_S3_BUCKET: 'b-1' }, 'AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are required when SVC_STORE=s3'],
    [{ ...s3, SVC_S3_ENDPOINT: 'http://minio:9000/base' }, 'SVC_S3_ENDPOINT must be an origin without a path, got "http://minio:9000/base"'],
    [{ ...s3, SVC_S3_ENDPOINT: 'ftp://x' }, 'SVC_S3_ENDPOINT must use http or https, got "ftp://x"'],
    [{ ...s3, SVC_S3_REGION: 'EU West' }, 'SVC_S3_REGION must be a region name such as us-east-1, got "EU West"'],
    [{ ...s3, SVC_S3_PREFIX: 'a/../b' }, 'SVC_S3_PREFIX must be path segments of A-Z a-z 0-9 . _ - separated by /, got "a/../b"'],
    [{ ...s3, SVC_S3_PRESIGN: 'maybe' }, 'SVC_S3_PRESIGN must be true or false, got "maybe"'],
    [{ ...s3, SVC_S3_PRESIGN_TTL: '8d' }, 'SVC_S3_PRESIGN_TTL must be between 60 and 604800 seconds, got "8d"'],
  ];
  for (const [env, message] of cases) t.throws(() => loadConfig(env), new ConfigError(message), message);
});

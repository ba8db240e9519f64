import t from 'tap';
import { ConfigError, loadConfig } from '../../../src/config/load.js';

// SVC_STORE=s3 and its variables (docs/s3.md): defaults and each validation message.
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
    deadline: 10,
    credentials: {
      static: { accessKeyId: 'AKID', secretAccessKey: 'secret', sessionToken: null },
      webIdentity: null,
      sharedFiles: { credentialsFile: null, configFile: null, profile: 'default', profileNamed: false },
      container: null,
      imds: { endpoint: 'http://169.254.169.254' },
    },
  });
  t.ok(Object.isFrozen(c.s3!.credentials.static), 'frozen');
});

t.test('s3 settings', async (t) => {
  const c = loadConfig({ ...s3, SVC_S3_ENDPOINT: 'http://127.0.0.1:9000/', SVC_S3_REGION: 'eu-west-3', SVC_S3_PREFIX: '/lfs/prod/', SVC_S3_PATH_STYLE: 'true', SVC_S3_PRESIGN: 'yes', SVC_S3_PRESIGN_TTL: '2h', AWS_SESSION_TOKEN: 'tok' });
  t.equal(c.s3!.endpoint, 'http://127.0.0.1:9000');
  t.equal(c.s3!.region, 'eu-west-3');
  t.equal(loadConfig({ ...s3, SVC_S3_DEADLINE: '3s' }).s3!.deadline, 3, 'SVC_S3_DEADLINE in seconds');
  t.throws(() => loadConfig({ ...s3, SVC_S3_DEADLINE: '0' }), ConfigError, 'SVC_S3_DEADLINE of at least 1 s');
  t.equal(c.s3!.prefix, 'lfs/prod/', 'slashes normalised, one trailing');
  t.equal(c.s3!.pathStyle, true);
  t.equal(c.s3!.presign, true);
  t.equal(c.s3!.presignTtl, 7200);
  t.equal(c.s3!.credentials.static!.sessionToken, 'tok');
  t.equal(loadConfig({ ...s3, SVC_S3_REGION: 'eu-central-1' }).s3!.endpoint, 'https://s3.eu-central-1.amazonaws.com', 'endpoint follows the region');
});

t.test('validation messages', async (t) => {
  const cases: [Record<string, string>, string][] = [
    [{ SVC_STORE: 'nfs' }, 'SVC_STORE must be disk or s3, got "nfs"'],
    [{ SVC_STORE: 's3', ...creds }, 'SVC_S3_BUCKET is required when SVC_STORE=s3'],
    [{ ...s3, SVC_S3_BUCKET: 'Bad_Bucket' }, 'SVC_S3_BUCKET must be a bucket name (3-63 of a-z 0-9 . -), got "Bad_Bucket"'],
    [{ SVC_STORE: 's3', SVC_S3_BUCKET: 'b-1', AWS_ACCESS_KEY_ID: 'AKID' }, 'AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together'],
    [{ ...s3, AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/lfs' }, 'AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN must be set together'],
    [{ ...s3, AWS_WEB_IDENTITY_TOKEN_FILE: '/t', AWS_ROLE_ARN: 'lfs' }, 'AWS_ROLE_ARN must be an IAM role ARN such as arn:aws:iam::123456789012:role/stowage, got "lfs"'],
    [{ ...s3, AWS_WEB_IDENTITY_TOKEN_FILE: '/t', AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/lfs', AWS_ROLE_SESSION_NAME: 'a b' }, 'AWS_ROLE_SESSION_NAME must be 2-64 of A-Z a-z 0-9 _ + = , . @ -, got "a b"'],
    [{ ...s3, AWS_WEB_IDENTITY_TOKEN_FILE: '/t', AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/lfs', AWS_REGION: 'EU' }, 'AWS_REGION must be a region name such as us-east-1, got "EU"'],
    [{ ...s3, AWS_WEB_IDENTITY_TOKEN_FILE: '/t', AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/lfs', AWS_ENDPOINT_URL_STS: 'sts' }, 'AWS_ENDPOINT_URL_STS must be an absolute http(s) URL, got "sts"'],
    [{ ...s3, AWS_PROFILE: 'my profile' }, 'AWS_PROFILE must be a profile name without spaces or brackets, got "my profile"'],
    [{ ...s3, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: 'v2/creds' }, 'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI must be a path starting with /, got "v2/creds"'],
    [{ ...s3, AWS_CONTAINER_CREDENTIALS_FULL_URI: 'creds' }, 'AWS_CONTAINER_CREDENTIALS_FULL_URI must be an absolute URL, got "creds"'],
    [{ ...s3, AWS_CONTAINER_CREDENTIALS_FULL_URI: 'http://agent.example/creds' }, 'AWS_CONTAINER_CREDENTIALS_FULL_URI must use https, or http to a loopback address or the ECS/EKS agent (169.254.170.2, 169.254.170.23, fd00:ec2::23), got "http://agent.example/creds"'],
    [{ ...s3, AWS_CONTAINER_CREDENTIALS_FULL_URI: 'http://127.evil.example/creds' }, 'AWS_CONTAINER_CREDENTIALS_FULL_URI must use https, or http to a loopback address or the ECS/EKS agent (169.254.170.2, 169.254.170.23, fd00:ec2::23), got "http://127.evil.example/creds"'],
    [{ ...s3, AWS_EC2_METADATA_DISABLED: 'sometimes' }, 'AWS_EC2_METADATA_DISABLED must be true or false, got "sometimes"'],
    [{ ...s3, AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE: 'IPv5' }, 'AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE must be IPv4 or IPv6, got "IPv5"'],
    [{ ...s3, AWS_EC2_METADATA_SERVICE_ENDPOINT: 'ftp://imds' }, 'AWS_EC2_METADATA_SERVICE_ENDPOINT must use http or https, got "ftp://imds"'],
    [{ ...s3, SVC_S3_ENDPOINT: 'http://minio:9000/base' }, 'SVC_S3_ENDPOINT must be an origin without a path, got "http://minio:9000/base"'],
    [{ ...s3, SVC_S3_ENDPOINT: 'ftp://x' }, 'SVC_S3_ENDPOINT must use http or https, got "ftp://x"'],
    [{ ...s3, SVC_S3_REGION: 'EU West' }, 'SVC_S3_REGION must be a region name such as us-east-1, got "EU West"'],
    [{ ...s3, SVC_S3_PREFIX: 'a/../b' }, 'SVC_S3_PREFIX must be path segments of A-Z a-z 0-9 . _ - separated by /, got "a/../b"'],
    [{ ...s3, SVC_S3_PRESIGN: 'maybe' }, 'SVC_S3_PRESIGN must be true or false, got "maybe"'],
    [{ ...s3, SVC_S3_PRESIGN_TTL: '8d' }, 'SVC_S3_PRESIGN_TTL must be between 60 and 604800 seconds, got "8d"'],
  ];
  for (const [env, message] of cases) t.throws(() => loadConfig(env), new ConfigError(message), message);
});

t.test('the credential chain from the AWS variables', async (t) => {
  // No keys: the rest of the chain, as the AWS SDKs set it up by default.
  const bare = loadConfig({ SVC_STORE: 's3', SVC_S3_BUCKET: 'lfs-objects', SVC_S3_REGION: 'eu-west-1', HOME: '/home/lfs' }).s3!.credentials;
  t.same(bare, {
    static: null,
    webIdentity: null,
    sharedFiles: { credentialsFile: '/home/lfs/.aws/credentials', configFile: '/home/lfs/.aws/config', profile: 'default', profileNamed: false },
    container: null,
    imds: { endpoint: 'http://169.254.169.254' },
  });
  const c = loadConfig({
    SVC_STORE: 's3',
    SVC_S3_BUCKET: 'lfs-objects',
    SVC_S3_REGION: 'eu-west-1',
    HOME: '/home/lfs',
    AWS_WEB_IDENTITY_TOKEN_FILE: '/var/run/secrets/eks.amazonaws.com/serviceaccount/token',
    AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/lfs',
    AWS_ROLE_SESSION_NAME: 'node-1',
    AWS_REGION: 'eu-central-1',
    AWS_SHARED_CREDENTIALS_FILE: '~/creds',
    AWS_CONFIG_FILE: '/etc/aws/config',
    AWS_PROFILE: 'lfs',
    AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: '/v2/credentials/abc',
    AWS_CONTAINER_AUTHORIZATION_TOKEN: 'tok',
    AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE: 'IPv6',
  }).s3!.credentials;
  t.same(c.webIdentity, { tokenFile: '/var/run/secrets/eks.amazonaws.com/serviceaccount/token', roleArn: 'arn:aws:iam::123456789012:role/lfs', sessionName: 'node-1', stsEndpoint: 'https://sts.eu-central-1.amazonaws.com' }, 'STS in AWS_REGION');
  t.same(c.sharedFiles, { credentialsFile: '/home/lfs/creds', configFile: '/etc/aws/config', profile: 'lfs', profileNamed: true });
  t.same(c.container, { url: 'http://169.254.170.2/v2/credentials/abc', token: 'tok', tokenFile: null }, 'ECS agent address');
  t.same(c.imds, { endpoint: 'http://[fd00:ec2::254]' });
  const overridden = loadConfig({
    ...s3,
    AWS_WEB_IDENTITY_TOKEN_FILE: '/t',
    AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/lfs',
    AWS_ENDPOINT_URL_STS: 'http://127.0.0.1:4566/',
    AWS_CONTAINER_CREDENTIALS_FULL_URI: 'http://169.254.170.23/v1/credentials',
    AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: '/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token',
    AWS_EC2_METADATA_SERVICE_ENDPOINT: 'http://127.0.0.1:1338',
  }).s3!.credentials;
  t.equal(overridden.webIdentity!.stsEndpoint, 'http://127.0.0.1:4566', 'AWS_ENDPOINT_URL_STS');
  t.equal(overridden.webIdentity!.stsEndpoint.includes('us-east-1'), false);
  t.same(overridden.container, { url: 'http://169.254.170.23/v1/credentials', token: null, tokenFile: '/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token' }, 'EKS Pod Identity');
  t.same(overridden.imds, { endpoint: 'http://127.0.0.1:1338' });
  t.equal(loadConfig({ ...s3, AWS_EC2_METADATA_DISABLED: 'true' }).s3!.credentials.imds, null, 'instance metadata off');
  t.equal(loadConfig({ ...s3, AWS_CONTAINER_CREDENTIALS_FULL_URI: 'https://agent.example/creds' }).s3!.credentials.container!.url, 'https://agent.example/creds', 'https anywhere');
  t.equal(loadConfig({ ...s3, AWS_CONTAINER_CREDENTIALS_FULL_URI: 'http://[::1]:9/c' }).s3!.credentials.container!.url, 'http://[::1]:9/c', 'IPv6 loopback');
});

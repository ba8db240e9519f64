import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ConfigError, loadAwsCredentials } from '../../src/config/load.js';
import { CredentialsError, type AwsCredentials } from '../../src/store/s3/credentials/aws-credentials.js';
import { ContainerSource } from '../../src/store/s3/credentials/container-source.js';
import { ImdsSource } from '../../src/store/s3/credentials/imds-source.js';
import { SharedFilesSource } from '../../src/store/s3/credentials/shared-files-source.js';
import { credentialChain } from '../../src/store/s3/credentials/source-chain.js';
import { WebIdentitySource } from '../../src/store/s3/credentials/web-identity-source.js';
import { startContainerEndpoint, startImds, startSts, type StandIn } from '../helpers/aws-stand-ins.js';
import { tmpDir } from '../helpers/start-server.js';

// Each credential source alone, then the chain's order, against local stand-ins of the AWS
// endpoints (test/helpers/aws-stand-ins.ts) and real files. The configuration goes through the
// same loader as the server's (loadAwsCredentials), from an environment given as a plain object.
const root = tmpDir('stowage-aws-creds-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const signal = new AbortController().signal;
const ROLE = 'arn:aws:iam::123456789012:role/lfs';

async function started(s: Promise<StandIn>): Promise<StandIn> {
  const standIn = await s;
  t.teardown(() => standIn.close());
  return standIn;
}

/** The chain's settings from an environment; IMDS is off unless the test points it at a stand-in. */
const settings = (env: Record<string, string>) => loadAwsCredentials({ AWS_EC2_METADATA_DISABLED: 'true', HOME: join(root, 'no-home'), ...env }, 'us-east-1');

const keysOf = (c: AwsCredentials | null) => (c === null ? null : { id: c.accessKeyId, secret: c.secretAccessKey, token: c.sessionToken, expires: c.expiration?.toISOString() ?? null });

t.test('instance metadata (IMDSv2): token, role, credentials', async (t) => {
  const imds = await started(startImds());
  const source = new ImdsSource(settings({ AWS_EC2_METADATA_DISABLED: 'false', AWS_EC2_METADATA_SERVICE_ENDPOINT: imds.url }).imds);
  const c = await source.load(signal);
  const want = imds.given(1);
  t.same(keysOf(c), { id: want.accessKeyId, secret: want.secretAccessKey, token: want.token, expires: want.expiration.toISOString() });
  t.equal(imds.count, 1, 'one credential request');
  t.match(String(imds.seen[0]!.headers['x-aws-ec2-metadata-token']), /^imds-token-\d+$/, 'the session token from PUT /latest/api/token was sent');

  imds.issue = () => ({ status: 500 });
  await t.rejects(source.load(signal), new CredentialsError('instance metadata: the credentials of role stowage-node answered 500'));
  t.equal(await new ImdsSource(settings({}).imds).load(signal), null, 'AWS_EC2_METADATA_DISABLED=true: not a source');

  const noRole = await started(startImds({ role: null }));
  await t.rejects(new ImdsSource({ endpoint: noRole.url }).load(signal), /this instance has no IAM role/);
});

t.test('web identity: the token file is read again at each load', async (t) => {
  const tokenFile = join(root, 'web-identity-token');
  writeFileSync(tokenFile, 'jwt-one\n');
  let valid = 'jwt-one';
  const sts = await started(startSts(ROLE, () => valid));
  const config = settings({ AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile, AWS_ROLE_ARN: ROLE, AWS_ENDPOINT_URL_STS: sts.url, AWS_ROLE_SESSION_NAME: 'node-1' }).webIdentity;
  const source = new WebIdentitySource(config);
  const first = await source.load(signal);
  const want = sts.given(1);
  t.same(keysOf(first), { id: want.accessKeyId, secret: want.secretAccessKey, token: want.token, expires: want.expiration.toISOString() }, 'credentials from the XML answer');
  const form = new URLSearchParams(sts.seen[0]!.body);
  t.equal(form.get('WebIdentityToken'), 'jwt-one');
  t.equal(form.get('RoleSessionName'), 'node-1');
  t.equal(sts.seen[0]!.headers.authorization, undefined, 'unsigned');

  // The kubelet rotates the projected token: the next load sends the new one.
  writeFileSync(tokenFile, 'jwt-two');
  valid = 'jwt-two';
  const second = await source.load(signal);
  t.equal(new URLSearchParams(sts.seen[1]!.body).get('WebIdentityToken'), 'jwt-two', 'token file read again');
  t.equal(second!.accessKeyId, sts.given(2).accessKeyId);

  valid = 'jwt-three';
  const refused = await source.load(signal).catch((e: Error) => e);
  t.type(refused, CredentialsError);
  t.equal((refused as Error).message, 'web identity: STS answered 400 InvalidIdentityToken: Token is expired or not valid');
  t.notMatch((refused as Error).message, /jwt-two/, 'the token is never in a message');
  rmSync(tokenFile);
  await t.rejects(source.load(signal), /AWS_WEB_IDENTITY_TOKEN_FILE cannot be read \(ENOENT/);
  t.equal(await new WebIdentitySource(null).load(signal), null, 'unset: not a source');
});

t.test('shared files: profiles, precedence, refusals', async (t) => {
  const dir = join(root, 'home', '.aws');
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'credentials'),
    ['# keys', '[default]', 'aws_access_key_id = AKIDDEFAULT', 'aws_secret_access_key = default-secret', '', '[lfs]', 'aws_access_key_id=AKIDLFS', 'aws_secret_access_key=lfs-secret', 'aws_session_token=lfs-token', '[assumed]', 'role_arn = arn:aws:iam::123456789012:role/x', 'source_profile = default'].join('\n'),
  );
  writeFileSync(
    join(dir, 'config'),
    ['[default]', 'region = eu-west-1', 's3 =', '  max_concurrent_requests = 4', '[profile cfg]', 'aws_access_key_id = AKIDCFG', 'aws_secret_access_key = cfg-secret', '[profile lfs]', 'aws_access_key_id = AKIDIGNORED', '[sso-session corp]', 'sso_region = us-east-1', '[profile sso]', 'sso_session = corp'].join('\n'),
  );
  const home = join(root, 'home');
  const load = (env: Record<string, string>) => new SharedFilesSource(settings({ HOME: home, ...env }).sharedFiles).load();
  t.same(keysOf(await load({})), { id: 'AKIDDEFAULT', secret: 'default-secret', token: null, expires: null }, 'default profile');
  t.same(keysOf(await load({ AWS_PROFILE: 'lfs' })), { id: 'AKIDLFS', secret: 'lfs-secret', token: 'lfs-token', expires: null }, 'the credentials file wins over the config file');
  t.same(keysOf(await load({ AWS_PROFILE: 'cfg' })), { id: 'AKIDCFG', secret: 'cfg-secret', token: null, expires: null }, 'keys in the config file');
  await t.rejects(load({ AWS_PROFILE: 'assumed' }), /profile "assumed" uses role_arn, which this server does not follow/);
  await t.rejects(load({ AWS_PROFILE: 'sso' }), /profile "sso" uses sso_session/);
  await t.rejects(load({ AWS_PROFILE: 'missing' }), /AWS_PROFILE names the profile "missing", which neither/);
  t.equal(await load({ AWS_SHARED_CREDENTIALS_FILE: join(root, 'nothing') }), null, 'default profile with only a region: not a source');
  t.equal(await load({ HOME: join(root, 'nowhere') }), null, 'no files: not a source');
});

t.test('container endpoint: full URI with a token file read at each load', async (t) => {
  const tokenFile = join(root, 'pod-identity-token');
  writeFileSync(tokenFile, 'pod-token-1');
  let want = 'pod-token-1';
  const agent = await started(startContainerEndpoint('/v1/credentials', () => want));
  const source = new ContainerSource(settings({ AWS_CONTAINER_CREDENTIALS_FULL_URI: `${agent.url}/v1/credentials`, AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: tokenFile }).container);
  const c = await source.load(signal);
  t.equal(c!.accessKeyId, agent.given(1).accessKeyId);
  t.equal(c!.sessionToken, agent.given(1).token);
  t.equal(c!.expiration!.toISOString(), agent.given(1).expiration.toISOString());
  writeFileSync(tokenFile, 'pod-token-2');
  want = 'pod-token-2';
  await source.load(signal);
  t.equal(agent.seen[1]!.headers.authorization, 'pod-token-2', 'rotated token sent');
  want = 'another';
  await t.rejects(source.load(signal), new CredentialsError('container endpoint: answered 401'));
  const withToken = new ContainerSource(settings({ AWS_CONTAINER_CREDENTIALS_FULL_URI: `${agent.url}/v1/credentials`, AWS_CONTAINER_AUTHORIZATION_TOKEN: 'another' }).container);
  t.ok(await withToken.load(signal), 'AWS_CONTAINER_AUTHORIZATION_TOKEN');
  t.throws(() => settings({ AWS_CONTAINER_CREDENTIALS_FULL_URI: 'http://10.0.0.5/creds' }), ConfigError, 'no plain http across a network');
});

t.test('the chain: the SDK order, the first source set up wins and stays', async (t) => {
  const tokenFile = join(root, 'chain-token');
  writeFileSync(tokenFile, 'jwt');
  const sts = await started(startSts(ROLE, () => 'jwt'));
  const agent = await started(startContainerEndpoint('/creds', () => null));
  const imds = await started(startImds());
  const home = join(root, 'home'); // holds a default profile (previous test)
  const everything = {
    AWS_ACCESS_KEY_ID: 'AKIDENV',
    AWS_SECRET_ACCESS_KEY: 'env-secret',
    AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile,
    AWS_ROLE_ARN: ROLE,
    AWS_ENDPOINT_URL_STS: sts.url,
    HOME: home,
    AWS_CONTAINER_CREDENTIALS_FULL_URI: `${agent.url}/creds`,
    AWS_EC2_METADATA_DISABLED: 'false',
    AWS_EC2_METADATA_SERVICE_ENDPOINT: imds.url,
  };
  const { AWS_ACCESS_KEY_ID: _a, AWS_SECRET_ACCESS_KEY: _s, ...noEnv } = everything;
  const { AWS_WEB_IDENTITY_TOKEN_FILE: _w, AWS_ROLE_ARN: _r, ...noWeb } = noEnv;
  const noFiles = { ...noWeb, HOME: join(root, 'nowhere') };
  const { AWS_CONTAINER_CREDENTIALS_FULL_URI: _c, ...onlyImds } = noFiles;
  const steps: [Record<string, string>, string, (() => string) | string][] = [
    [everything, 'environment', 'AKIDENV'],
    [noEnv, 'web identity', () => sts.given(sts.count).accessKeyId],
    [noWeb, 'shared files', 'AKIDDEFAULT'],
    [noFiles, 'container endpoint', () => agent.given(agent.count).accessKeyId],
    [onlyImds, 'instance metadata', () => imds.given(imds.count).accessKeyId],
  ];
  const counts = () => [sts.count, agent.count, imds.count];
  let before = counts();
  for (const [env, name, id] of steps) {
    const chain = credentialChain(settings(env));
    t.equal(chain.name, 'chain', 'no source chosen before the first load');
    const c = await chain.load(signal);
    t.equal(chain.name, name, `${name} chosen`);
    t.equal(c.accessKeyId, typeof id === 'string' ? id : id(), `${name}'s credentials`);
    const after = counts();
    const asked = ['web identity', 'container endpoint', 'instance metadata'].filter((_, i) => after[i] !== before[i]);
    t.same(asked, ['web identity', 'container endpoint', 'instance metadata'].includes(name) ? [name] : [], 'no endpoint after the chosen one was asked');
    before = after;
  }
  // Chosen once, kept: a later load goes to the same source without walking the chain again.
  const chain = credentialChain(settings(noFiles));
  await chain.load(signal);
  await chain.load(signal);
  t.equal(imds.count, before[2], 'instance metadata never asked while the container endpoint answers');
  t.equal(agent.count, before[1]! + 2);

  const nothing = credentialChain(settings({}));
  await t.rejects(nothing.load(signal), /^no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/, 'nothing set up, instance metadata off');
  // A source set up but failing stops the chain with its own error (as the SDKs do).
  // Nothing set up and instance metadata unreachable: "no credentials", and the chain is walked again next time.
  const unreachable = credentialChain(settings({ AWS_EC2_METADATA_DISABLED: 'false', AWS_EC2_METADATA_SERVICE_ENDPOINT: 'http://127.0.0.1:1' }));
  await t.rejects(unreachable.load(signal), /^no S3 credentials: set AWS_ACCESS_KEY_ID.* \(instance metadata: ECONNREFUSED \(http:\/\/127\.0\.0\.1:1\)\)$/);
  t.equal(unreachable.name, 'chain', 'not kept');
  const failing = credentialChain(settings({ ...noEnv, AWS_ENDPOINT_URL_STS: 'http://127.0.0.1:1' }));
  await t.rejects(failing.load(signal), /^web identity: ECONNREFUSED/);
  t.equal(failing.name, 'web identity');
});

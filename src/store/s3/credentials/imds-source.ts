import type { AwsImdsConfig } from '../../../config/schema.js';
import { ConfiguredSource, credentialsFrom, CredentialsError, type AwsCredentials } from './aws-credentials.js';
import { fetchCredentialText, parseJsonAnswer } from './credential-http.js';

/** The SDKs give the instance metadata service 1 s per call: it is on the instance itself. */
const IMDS_TIMEOUT_MS = 1_000;

/** Lifetime asked for the session token (6 h, the most IMDS grants); a new one is taken per load. */
const TOKEN_TTL_SECONDS = '21600';

const ROLES_PATH = '/latest/meta-data/iam/security-credentials/';

/**
 * EC2 instance metadata, IMDSv2 only
 * (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html): a session
 * token from `PUT /latest/api/token`, then `GET …/iam/security-credentials/` for the role and
 * `GET …/{role}` for its credentials.
 */
export class ImdsSource extends ConfiguredSource<AwsImdsConfig> {
  readonly name = 'instance metadata';

  protected async fetch(config: AwsImdsConfig, signal: AbortSignal): Promise<AwsCredentials> {
    const base = config.endpoint;
    const call = { timeoutMs: IMDS_TIMEOUT_MS, signal };
    const token = await fetchCredentialText(this.name, `${base}/latest/api/token`, { ...call, method: 'PUT', headers: { 'x-aws-ec2-metadata-token-ttl-seconds': TOKEN_TTL_SECONDS } });
    if (token.status !== 200 || token.text === '') throw new CredentialsError(`instance metadata: the token request answered ${token.status}`);
    const headers = { 'x-aws-ec2-metadata-token': token.text.trim() };
    const roles = await fetchCredentialText(this.name, `${base}${ROLES_PATH}`, { ...call, method: 'GET', headers });
    // 404: the instance has no instance profile (no role attached).
    if (roles.status === 404) throw new CredentialsError('instance metadata: this instance has no IAM role (no instance profile attached)');
    if (roles.status !== 200) throw new CredentialsError(`instance metadata: the role listing answered ${roles.status}`);
    const role = roles.text.split('\n')[0]!.trim();
    if (!/^[\w+=,.@-]{1,128}$/.test(role)) throw new CredentialsError('instance metadata: the role listing is not a role name');
    const answer = await fetchCredentialText(this.name, `${base}${ROLES_PATH}${role}`, { ...call, method: 'GET', headers });
    if (answer.status !== 200) throw new CredentialsError(`instance metadata: the credentials of role ${role} answered ${answer.status}`);
    const j = parseJsonAnswer(this.name, answer.text);
    if (j.Code !== undefined && j.Code !== 'Success') throw new CredentialsError(`instance metadata: the credentials of role ${role} are not available (Code ${String(j.Code)})`);
    return credentialsFrom(this.name, j.AccessKeyId, j.SecretAccessKey, j.Token, j.Expiration);
  }
}

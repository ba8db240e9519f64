import { readFile } from 'node:fs/promises';
import type { AwsWebIdentityConfig } from '../../../config/schema.js';
import { ConfiguredSource, credentialsFrom, CredentialsError, type AwsCredentials } from './aws-credentials.js';
import { fetchCredentialText } from './credential-http.js';

/** STS answers within a few hundred ms; the SDKs give it seconds. */
const STS_TIMEOUT_MS = 5_000;

const STS_VERSION = '2011-06-15';

/**
 * Web identity (EKS service accounts, GitHub OIDC …): the token file is exchanged with STS, unsigned
 * (https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html); read again
 * at every refresh, since the kubelet rotates it.
 */
export class WebIdentitySource extends ConfiguredSource<AwsWebIdentityConfig> {
  readonly name = 'web identity';

  protected async fetch(c: AwsWebIdentityConfig, signal: AbortSignal): Promise<AwsCredentials> {
    let token: string;
    try {
      token = (await readFile(c.tokenFile, 'utf8')).trim();
    } catch (e) {
      throw new CredentialsError(`web identity: AWS_WEB_IDENTITY_TOKEN_FILE cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'}: ${c.tokenFile})`);
    }
    if (token === '') throw new CredentialsError(`web identity: AWS_WEB_IDENTITY_TOKEN_FILE is empty (${c.tokenFile})`);
    const form = new URLSearchParams({
      Action: 'AssumeRoleWithWebIdentity',
      Version: STS_VERSION,
      RoleArn: c.roleArn,
      // Session names are [\w+=,.@-]{2,64}; the SDKs make one from the time the same way.
      RoleSessionName: c.sessionName ?? `stowage-${Date.now()}`,
      WebIdentityToken: token,
    });
    const { status, text } = await fetchCredentialText(this.name, c.stsEndpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8', accept: 'application/xml' },
      body: form.toString(),
      timeoutMs: STS_TIMEOUT_MS,
      signal,
    });
    if (status !== 200) {
      // <ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>…</Message></Error></ErrorResponse>
      const code = xmlText(text, 'Code') ?? `HTTP ${status}`;
      const message = xmlText(text, 'Message');
      throw new CredentialsError(`web identity: STS answered ${status} ${code}${message === null ? '' : `: ${message}`}`);
    }
    // <AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>
    //   <AccessKeyId/><SecretAccessKey/><SessionToken/><Expiration>2014-10-24T23:00:23Z</Expiration>
    const creds = xmlBlock(text, 'Credentials');
    if (creds === null) throw new CredentialsError('web identity: the STS answer holds no Credentials');
    return credentialsFrom(this.name, xmlText(creds, 'AccessKeyId'), xmlText(creds, 'SecretAccessKey'), xmlText(creds, 'SessionToken'), xmlText(creds, 'Expiration'));
  }
}

const ENTITIES: Readonly<Record<string, string>> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

/** Raw content of the first <tag>…</tag> (STS answers use no prefixes). */
function xmlBlock(xml: string, tag: string): string | null {
  return new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(xml)?.[1] ?? null;
}

function xmlText(xml: string, tag: string): string | null {
  const raw = xmlBlock(xml, tag);
  if (raw === null) return null;
  return raw.trim().replace(/&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-f]+);/gi, (_, e: string) =>
    e[0] === '#' ? String.fromCodePoint(e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : Number(e.slice(1))) : ENTITIES[e.toLowerCase()]!,
  );
}

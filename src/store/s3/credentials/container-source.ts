import { readFile } from 'node:fs/promises';
import type { AwsContainerConfig } from '../../../config/schema.js';
import { ConfiguredSource, credentialsFrom, CredentialsError, type AwsCredentials } from './aws-credentials.js';
import { fetchCredentialText, parseJsonAnswer } from './credential-http.js';

/** The SDKs' default for the container endpoint, a link-local hop away. */
const CONTAINER_TIMEOUT_MS = 1_000;

/**
 * The container credentials endpoint (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html):
 * ECS task roles (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI) and EKS Pod Identity or other agents
 * (AWS_CONTAINER_CREDENTIALS_FULL_URI, with the authorization token or token file, read at each load
 * since the agent rotates it).
 */
export class ContainerSource extends ConfiguredSource<AwsContainerConfig> {
  readonly name = 'container endpoint';

  protected async fetch(c: AwsContainerConfig, signal: AbortSignal): Promise<AwsCredentials> {
    const headers: Record<string, string> = { accept: 'application/json' };
    const token = await this.#token(c);
    if (token !== null) headers.authorization = token;
    const { status, text } = await fetchCredentialText(this.name, c.url, { method: 'GET', headers, timeoutMs: CONTAINER_TIMEOUT_MS, signal });
    if (status !== 200) throw new CredentialsError(`container endpoint: answered ${status}`);
    const j = parseJsonAnswer(this.name, text);
    return credentialsFrom(this.name, j.AccessKeyId, j.SecretAccessKey, j.Token, j.Expiration);
  }

  async #token(c: AwsContainerConfig): Promise<string | null> {
    if (c.tokenFile === null) return c.token;
    try {
      return (await readFile(c.tokenFile, 'utf8')).trim();
    } catch (e) {
      throw new CredentialsError(`container endpoint: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'}: ${c.tokenFile})`);
    }
  }
}

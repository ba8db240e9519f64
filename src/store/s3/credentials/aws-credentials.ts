/**
 * What every credential source hands over, and how a source is driven. The sources follow the AWS
 * SDKs' default chain (https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html):
 * environment, web identity, shared files, container endpoint, instance metadata.
 */

/** One set of bucket credentials. `expiration` null: they do not expire (static keys). */
export interface AwsCredentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken: string | null;
  readonly expiration: Date | null;
}

export interface CredentialSource {
  /** Short name for logs ("environment", "web identity", "instance metadata" …); never a secret. */
  readonly name: string;
  /**
   * Fetches the current credentials. Null: this source is not set up here (the chain moves on).
   * Throws when it is set up but cannot answer; the message never holds a secret or a token.
   */
  load(signal: AbortSignal): Promise<AwsCredentials | null>;
}

/** A source set up by its part of the configuration (null: not set up, so load() answers null). */
export abstract class ConfiguredSource<C> implements CredentialSource {
  abstract readonly name: string;
  readonly #config: C | null;

  constructor(config: C | null) {
    this.#config = config;
  }

  load(signal: AbortSignal): Promise<AwsCredentials | null> {
    return this.#config === null ? Promise.resolve(null) : this.fetch(this.#config, signal);
  }

  /** Fetches with this source's settings; throws CredentialsError when it cannot. */
  protected abstract fetch(config: C, signal: AbortSignal): Promise<AwsCredentials>;
}

/** A source that is set up but failed (endpoint down, refusal, malformed answer). */
export class CredentialsError extends Error {
  override name = 'CredentialsError';
}

/**
 * Checks the fields every AWS credential answer carries (the IMDS and container JSON use
 * `Token`, STS `SessionToken`); `expiration` must be an ISO 8601 instant when present.
 */
export function credentialsFrom(source: string, accessKeyId: unknown, secretAccessKey: unknown, sessionToken: unknown, expiration: unknown): AwsCredentials {
  if (typeof accessKeyId !== 'string' || accessKeyId === '' || typeof secretAccessKey !== 'string' || secretAccessKey === '') {
    throw new CredentialsError(`${source}: the answer holds no AccessKeyId and SecretAccessKey`);
  }
  if (sessionToken !== undefined && sessionToken !== null && typeof sessionToken !== 'string') throw new CredentialsError(`${source}: the session token is not a string`);
  let expires: Date | null = null;
  if (expiration !== undefined && expiration !== null) {
    expires = new Date(String(expiration));
    if (Number.isNaN(expires.getTime())) throw new CredentialsError(`${source}: Expiration is not a date`);
  }
  return { accessKeyId, secretAccessKey, sessionToken: sessionToken === '' || sessionToken === undefined ? null : sessionToken, expiration: expires };
}

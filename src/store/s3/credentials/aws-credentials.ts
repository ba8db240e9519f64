/** Credential sources, in the AWS SDKs' default chain (https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html). */

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
  /** The current credentials; null when not set up here. Throws when set up but failing, never with a secret in the message. */
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

  protected abstract fetch(config: C, signal: AbortSignal): Promise<AwsCredentials>;
}

export class CredentialsError extends Error {
  override name = 'CredentialsError';
}

/** Checks the fields every AWS credential answer carries (`Token` or `SessionToken`; `expiration` ISO 8601). */
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

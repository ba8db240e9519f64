import type { AwsCredentials, CredentialSource } from './aws-credentials.js';
import { CredentialsCache, type CredentialsProvider } from './credentials-cache.js';

/**
 * Keys given as they are: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, first in
 * the chain as in the AWS SDKs. They never expire here, so they are never fetched again.
 */
export class StaticSource implements CredentialSource {
  readonly name: string;
  readonly #credentials: AwsCredentials | null;

  constructor(keys: { readonly accessKeyId: string; readonly secretAccessKey: string; readonly sessionToken: string | null } | null, name = 'environment') {
    this.name = name;
    this.#credentials = keys === null ? null : { ...keys, expiration: null };
  }

  async load(): Promise<AwsCredentials | null> {
    return this.#credentials;
  }
}

/** A provider of keys that never change (tools and tests that talk to a bucket directly). */
export function fixedCredentials(keys: { readonly accessKeyId: string; readonly secretAccessKey: string; readonly sessionToken: string | null }): CredentialsProvider {
  return new CredentialsCache(new StaticSource(keys, 'fixed keys'), { log: () => undefined });
}

import type { AwsCredentialsConfig } from '../../../config/schema.js';
import { CredentialsError, type AwsCredentials, type CredentialSource } from './aws-credentials.js';
import { ContainerSource } from './container-source.js';
import { ImdsSource } from './imds-source.js';
import { SharedFilesSource } from './shared-files-source.js';
import { StaticSource } from './static-source.js';
import { WebIdentitySource } from './web-identity-source.js';

const NO_CREDENTIALS =
  'no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, ' +
  'or a profile with keys in the shared credentials file, or run where a container or instance role is available';

/**
 * The AWS SDKs' default order (fromNodeProviderChain): the first source set up here is kept for every
 * later refresh, failing or not (its error is the one worth seeing). Instance metadata, tried last
 * unless AWS_EC2_METADATA_DISABLED=true, is kept only once it answered.
 */
export class SourceChain implements CredentialSource {
  readonly #sources: readonly CredentialSource[];
  #chosen: CredentialSource | null = null;

  constructor(sources: readonly CredentialSource[]) {
    this.#sources = sources;
  }

  /** The chosen source's name once one answered or failed; `chain` before. */
  get name(): string {
    return this.#chosen?.name ?? 'chain';
  }

  async load(signal: AbortSignal): Promise<AwsCredentials> {
    if (this.#chosen !== null) return this.#required(this.#chosen, await this.#chosen.load(signal));
    for (const [i, source] of this.#sources.entries()) {
      let found: AwsCredentials | null;
      try {
        found = await source.load(signal);
      } catch (e) {
        // The last source (instance metadata) is tried wherever nothing else is set up: its failure
        // then means "no credentials here", and the next load walks the chain again.
        if (i === this.#sources.length - 1) throw new CredentialsError(`${NO_CREDENTIALS} (${(e as Error).message})`, { cause: e });
        this.#chosen = source;
        throw e;
      }
      if (found !== null) {
        this.#chosen = source;
        return found;
      }
    }
    throw new CredentialsError(NO_CREDENTIALS);
  }

  #required(source: CredentialSource, found: AwsCredentials | null): AwsCredentials {
    if (found === null) throw new CredentialsError(`${source.name}: no longer set up`);
    return found;
  }
}

/** The chain the configuration describes, in the SDKs' order. */
export function credentialChain(config: AwsCredentialsConfig): SourceChain {
  return new SourceChain([
    new StaticSource(config.static),
    new WebIdentitySource(config.webIdentity),
    new SharedFilesSource(config.sharedFiles),
    new ContainerSource(config.container),
    new ImdsSource(config.imds),
  ]);
}

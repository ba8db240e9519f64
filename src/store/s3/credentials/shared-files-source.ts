import { readFile } from 'node:fs/promises';
import type { AwsSharedFilesConfig } from '../../../config/schema.js';
import { CredentialsError, type AwsCredentials, type CredentialSource } from './aws-credentials.js';

type Profile = Record<string, string>;

/** Profile settings this server does not act on; a profile using one of them is refused by name. */
const UNSUPPORTED = ['role_arn', 'credential_process', 'sso_session', 'sso_start_url', 'web_identity_token_file'] as const;

/**
 * The shared files (https://docs.aws.amazon.com/sdkref/latest/guide/file-format.html): static keys of
 * one profile (AWS_PROFILE, else `default`); assumed roles, `credential_process` and SSO are refused
 * by name. Read at each load, so rotated keys are picked up.
 */
export class SharedFilesSource implements CredentialSource {
  readonly name = 'shared files';
  readonly #config: AwsSharedFilesConfig;

  constructor(config: AwsSharedFilesConfig) {
    this.#config = config;
  }

  async load(): Promise<AwsCredentials | null> {
    const c = this.#config;
    const fromConfig = parseIni(await readOptional(c.configFile), true);
    const fromCredentials = parseIni(await readOptional(c.credentialsFile), false);
    const profile: Profile | undefined =
      fromConfig[c.profile] === undefined && fromCredentials[c.profile] === undefined ? undefined : { ...fromConfig[c.profile], ...fromCredentials[c.profile] };
    if (profile === undefined) {
      // The default profile may well be absent; a profile named in AWS_PROFILE must exist (as in the SDKs).
      if (c.profileNamed) throw new CredentialsError(`shared files: AWS_PROFILE names the profile "${c.profile}", which neither ${c.credentialsFile ?? '(no credentials file)'} nor ${c.configFile ?? '(no config file)'} holds`);
      return null;
    }
    const id = profile.aws_access_key_id ?? '';
    const secret = profile.aws_secret_access_key ?? '';
    if (id !== '' && secret !== '') return { accessKeyId: id, secretAccessKey: secret, sessionToken: profile.aws_session_token || null, expiration: null };
    const unsupported = UNSUPPORTED.find((k) => profile[k] !== undefined);
    if (unsupported !== undefined) {
      throw new CredentialsError(`shared files: profile "${c.profile}" uses ${unsupported}, which this server does not follow; give it aws_access_key_id and aws_secret_access_key, or use the environment, web identity, container or instance credentials`);
    }
    // A profile with settings but no keys (say, only `region`): not a credential source.
    return null;
  }
}

async function readOptional(path: string | null): Promise<string> {
  if (path === null) return '';
  try {
    return await readFile(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return '';
    throw new CredentialsError(`shared files: ${path} cannot be read (${code ?? 'error'})`);
  }
}

/** The AWS INI dialect: `[name]` / `[profile name]` sections, `key = value`, `#` and `;` comments; nested settings and other sections skipped. */
export function parseIni(text: string, configFile: boolean): Record<string, Profile> {
  const out: Record<string, Profile> = Object.create(null) as Record<string, Profile>;
  let current: Profile | null = null;
  for (const line of text.split(/\r?\n/)) {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#') || trimmed.startsWith(';')) continue;
    const section = /^\[\s*([^\]]*?)\s*\]$/.exec(trimmed);
    if (section !== null) {
      let name: string | null = section[1]!;
      if (configFile) {
        const m = /^profile\s+(\S+)$/.exec(name);
        name = m !== null ? m[1]! : name === 'default' ? 'default' : null;
      }
      current = name === null ? null : (out[name] ??= Object.create(null) as Profile);
      continue;
    }
    if (current === null || /^\s/.test(line)) continue;
    const eq = trimmed.indexOf('=');
    if (eq <= 0) continue;
    current[trimmed.slice(0, eq).trim().toLowerCase()] = trimmed.slice(eq + 1).trim();
  }
  return out;
}

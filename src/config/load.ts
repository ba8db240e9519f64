import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { parseRepoName } from '../protocol/repo-name.js';
import { DEFAULTS, PROVIDER_ALIASES, type AwsContainerConfig, type AwsCredentialsConfig, type AwsWebIdentityConfig, type Config, type ConfigVariable, type EncryptionConfig, type ForgeProvider, type S3Config, type CacheConfig } from './schema.js';

/** A configuration value that cannot be used; main.ts prints `message` and exits non-zero. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

type Env = Readonly<Record<string, string | undefined>>;

const PROVIDERS: readonly ForgeProvider[] = ['forge_a', 'forge_b', 'forge_c', 'forge_d'];

/** Reads one variable: the environment's value when set and non-empty, else the default. */
function raw(env: Env, name: ConfigVariable): string | null {
  const v = env[name];
  if (v !== undefined && v.trim() !== '') return v.trim();
  return DEFAULTS[name];
}

/** A bearer token Prometheus can send: visible ASCII, long enough not to be guessed. */
function parseMetricsToken(value: string | null): string | null {
  if (value === null) return null;
  // The value itself is never echoed: it is a secret.
  if (!/^[\x21-\x7e]{16,}$/.test(value)) throw new ConfigError('SVC_METRICS_TOKEN must be at least 16 visible ASCII characters (no spaces), such as the output of openssl rand -hex 32');
  return value;
}

/** Whole number within [min, max]. */
export function parseInteger(name: string, value: string, min: number, max: number): number {
  if (!/^\d+$/.test(value)) throw new ConfigError(`${name} must be a whole number, got "${value}"`);
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  }
  return n;
}

const DURATION_UNITS: Record<string, number> = { '': 1, s: 1, m: 60, h: 3600, d: 86400 };

/** Seconds, written as `90`, `90s`, `15m`, `2h` or `14d`. */
export function parseDuration(name: string, value: string, min: number, max: number): number {
  const m = /^(\d+)\s*([smhd]?)$/i.exec(value);
  if (!m) throw new ConfigError(`${name} must be a duration such as 30, 30s, 15m, 2h or 14d, got "${value}"`);
  const seconds = Number(m[1]) * DURATION_UNITS[m[2]!.toLowerCase()]!;
  if (seconds < min || seconds > max) {
    throw new ConfigError(`${name} must be between ${min} and ${max} seconds, got "${value}"`);
  }
  return seconds;
}

const SIZE_UNITS: Record<string, number> = { '': 1, b: 1, k: 1024, kib: 1024, m: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gib: 1024 ** 3, t: 1024 ** 4, tib: 1024 ** 4 };

/** Bytes, written as `1000`, `64KiB`, `4M`, `5GiB`, `2T` (binary units). */
export function parseSize(name: string, value: string, min: number, max: number): number {
  const m = /^(\d+)\s*([a-z]*)$/i.exec(value);
  const unit = m ? SIZE_UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new ConfigError(`${name} must be a size such as 1000, 64KiB, 4MiB or 5GiB, got "${value}"`);
  const bytes = Number(m[1]) * unit;
  if (!Number.isSafeInteger(bytes) || bytes < min || bytes > max) {
    throw new ConfigError(`${name} must be between ${min} and ${max} bytes, got "${value}"`);
  }
  return bytes;
}

export function parseBoolean(name: string, value: string): boolean {
  if (/^(1|true|yes|on)$/i.test(value)) return true;
  if (/^(0|false|no|off)$/i.test(value)) return false;
  throw new ConfigError(`${name} must be true or false, got "${value}"`);
}

/** An absolute http(s) URL without query or fragment; returned without a trailing slash. */
/** Cache mode's settings, or null when SVC_UPSTREAM_LFS_URL is unset (docs/cache.md). */
function loadCache(env: Env): CacheConfig | null {
  const template = raw(env, 'SVC_UPSTREAM_LFS_URL');
  if (template === null) return null;
  if (!template.includes('{org}') || !template.includes('{repo}')) {
    throw new ConfigError(`SVC_UPSTREAM_LFS_URL must contain both {org} and {repo}, got "${template}"`);
  }
  // Checked as a URL with the placeholders filled in: the braces themselves are no URL characters.
  parseHttpUrl('SVC_UPSTREAM_LFS_URL', template.replaceAll('{org}', 'org').replaceAll('{repo}', 'repo'));
  const secret = raw(env, 'SVC_CACHE_LINK_SECRET');
  if (secret !== null && !/^[\x21-\x7e]{32,}$/.test(secret)) {
    throw new ConfigError('SVC_CACHE_LINK_SECRET must be at least 32 visible ASCII characters (no spaces), such as the output of openssl rand -hex 32');
  }
  return {
    upstreamTemplate: template.replace(/\/+$/, ''),
    maxSize: parseSize('SVC_CACHE_MAX_SIZE', raw(env, 'SVC_CACHE_MAX_SIZE')!, 1, 2 ** 50),
    linkSecret: secret,
  };
}

export function parseHttpUrl(name: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${name} must be an absolute http(s) URL, got "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`${name} must use http or https, got "${value}"`);
  }
  if (url.search || url.hash) throw new ConfigError(`${name} must not carry a query or fragment, got "${value}"`);
  if (url.username || url.password) throw new ConfigError(`${name} must not carry credentials`);
  return url.toString().replace(/\/+$/, '');
}

const PATTERN_SEGMENT_RE = /^[A-Za-z0-9_.*-]{1,100}$/;

/**
 * An allow list: organisations (`acme`) or `org/repo` patterns (`acme/game-*`), `*` matching any run
 * of characters within one segment; separated by commas or whitespace. Returned lower-cased (forge
 * names are case-insensitive) and de-duplicated; an empty value means "every repository".
 */
export function parseRepoPatterns(name: string, value: string): string[] {
  const out: string[] = [];
  for (const item of value.split(/[\s,]+/)) {
    if (item === '') continue;
    const parts = item.split('/');
    if (parts.length > 2 || parts.some((p) => !PATTERN_SEGMENT_RE.test(p) || /^\.+$/.test(p))) {
      throw new ConfigError(`${name} must list organisations or org/repo patterns such as acme, acme/game-*; got "${item}"`);
    }
    const normal = item.toLowerCase();
    if (!out.includes(normal)) out.push(normal);
  }
  return out;
}

/** A readable PEM private key (the GitHub App identity's signing key). */
/** SVC_ENCRYPTION (on|off, default: on when keys are given), where the keys come from (they are read at start), and SVC_ENCRYPTION_CIPHER. */
function parseEncryption(mode: string | null, keyFile: string | null, keyCommand: string | null, cipher: string): EncryptionConfig {
  if (keyFile !== null && keyCommand !== null) throw new ConfigError('set SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND, not both');
  const keys = keyFile !== null || keyCommand !== null;
  if (mode !== null && mode !== 'on' && mode !== 'off') throw new ConfigError(`SVC_ENCRYPTION must be on or off, got "${mode}"`);
  if (mode === 'on' && !keys) throw new ConfigError('SVC_ENCRYPTION=on needs SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND');
  if (cipher !== 'auto' && cipher !== 'openssl') throw new ConfigError(`SVC_ENCRYPTION_CIPHER must be auto or openssl, got "${cipher}"`);
  return { keyFile: keyFile === null ? null : resolve(keyFile), keyCommand, encryptNew: mode === null ? keys : mode === 'on', cipher };
}

function checkPrivateKeyFile(name: string, path: string): void {
  let pem: Buffer;
  try {
    pem = readFileSync(path);
  } catch (e) {
    throw new ConfigError(`${name} cannot be read: ${(e as NodeJS.ErrnoException).code ?? String(e)} (${path})`);
  }
  try {
    const key = createPrivateKey(pem);
    if (key.asymmetricKeyType !== 'rsa') throw new Error('not an RSA key');
  } catch {
    throw new ConfigError(`${name} is not a PEM RSA private key (${path})`);
  }
}

/** `off`, `zstd` (level 3) or `zstd:N` with N from 1 to 19. */
export function parseCompression(value: string): number | null {
  if (/^off$/i.test(value)) return null;
  const m = /^zstd(?::(\d{1,2}))?$/i.exec(value);
  if (!m) throw new ConfigError(`SVC_COMPRESSION must be off, zstd or zstd:LEVEL, got "${value}"`);
  const level = m[1] === undefined ? 3 : Number(m[1]);
  if (level < 1 || level > 19) throw new ConfigError(`SVC_COMPRESSION level must be between 1 and 19, got ${level}`);
  return level;
}

/** `forge_a`…`forge_d`, or a forge's name (`github`, `gitlab`, `gitea`, `forgejo`), in any case. */
export function parseProvider(value: string): ForgeProvider {
  const v = value.toLowerCase();
  const provider = PROVIDER_ALIASES[v] ?? (PROVIDERS as readonly string[]).find((p) => p === v);
  if (provider === undefined) {
    const aliases = Object.entries(PROVIDER_ALIASES).map(([name, p]) => `${name} (${p})`);
    throw new ConfigError(`SVC_AUTH must be one of ${PROVIDERS.join(', ')} or ${aliases.join(', ')}, got "${value}"`);
  }
  return provider as ForgeProvider;
}

/** Edit distance (insertions, deletions, substitutions): how far a typo is from a known name. */
export function levenshtein(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur.push(Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    prev = cur;
  }
  return prev[b.length]!;
}

/**
 * Things worth telling at start that do not stop it: an `SVC_` variable this server does not know
 * (a typo such as SVC_COMPRESION would otherwise be ignored silently), with the nearest known name.
 */
export function configWarnings(env: Env): string[] {
  const known = Object.keys(DEFAULTS);
  const warnings: string[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith('SVC_') || name in DEFAULTS) continue;
    const nearest = known.reduce((best, k) => (levenshtein(name, k) < levenshtein(name, best) ? k : best));
    warnings.push(`${name} is not a Stowage variable and is ignored; did you mean ${nearest}?`);
  }
  return warnings;
}

/**
 * A database URL fit for a log line or an error message: the password (and anything in the query,
 * where libpq also takes one) replaced by `***`. Works on text that is not a valid URL too.
 */
export function redactDatabaseUrl(url: string): string {
  let out = url;
  // The password runs from the first ':' of the user info to the last '@' (it may hold '@' or '/' unencoded).
  const at = out.lastIndexOf('@');
  const from = out.includes('//') ? out.indexOf('//') + 2 : 0;
  const colon = out.indexOf(':', from);
  if (at !== -1 && colon !== -1 && colon < at) out = `${out.slice(0, colon)}:***${out.slice(at)}`;
  const query = out.indexOf('?');
  if (query !== -1 && query < out.length - 1) out = `${out.slice(0, query)}?***`;
  return out;
}

/** SVC_DATABASE_URL: a postgres:// or postgresql:// URL naming a host, or null (the SQLite index). */
function parseDatabaseUrl(value: string | null): string | null {
  if (value === null) return null;
  let ok = /^postgres(ql)?:\/\//.test(value);
  if (ok) {
    try {
      ok = new URL(value).hostname !== '';
    } catch {
      ok = false;
    }
  }
  if (!ok) throw new ConfigError(`SVC_DATABASE_URL must be a postgres:// or postgresql:// URL with a host, got "${redactDatabaseUrl(value)}"`);
  return value;
}

/** SVC_STORE=s3: the bucket settings and credentials (docs/s3.md); null for the disk store. */
function loadS3(env: Env, store: 'disk' | 's3'): S3Config | null {
  if (store === 'disk') return null;
  const bucket = raw(env, 'SVC_S3_BUCKET');
  if (bucket === null) throw new ConfigError('SVC_S3_BUCKET is required when SVC_STORE=s3');
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) throw new ConfigError(`SVC_S3_BUCKET must be a bucket name (3-63 of a-z 0-9 . -), got "${bucket}"`);
  const region = raw(env, 'SVC_S3_REGION')!;
  if (!/^[a-z0-9-]{1,50}$/.test(region)) throw new ConfigError(`SVC_S3_REGION must be a region name such as us-east-1, got "${region}"`);
  const endpointRaw = raw(env, 'SVC_S3_ENDPOINT');
  const endpoint = endpointRaw === null ? `https://s3.${region}.amazonaws.com` : parseHttpUrl('SVC_S3_ENDPOINT', endpointRaw);
  if (new URL(endpoint).pathname !== '/') throw new ConfigError(`SVC_S3_ENDPOINT must be an origin without a path, got "${endpointRaw}"`);
  const prefixRaw = raw(env, 'SVC_S3_PREFIX') ?? '';
  const prefix = prefixRaw.replace(/^\/+|\/+$/g, '');
  if (prefix !== '' && (!/^[A-Za-z0-9._\/-]{1,200}$/.test(prefix) || prefix.split('/').some((p) => p === '' || /^\.+$/.test(p)))) {
    throw new ConfigError(`SVC_S3_PREFIX must be path segments of A-Z a-z 0-9 . _ - separated by /, got "${prefixRaw}"`);
  }
  return {
    bucket,
    endpoint,
    region,
    prefix: prefix === '' ? '' : `${prefix}/`,
    pathStyle: parseBoolean('SVC_S3_PATH_STYLE', raw(env, 'SVC_S3_PATH_STYLE')!),
    presign: parseBoolean('SVC_S3_PRESIGN', raw(env, 'SVC_S3_PRESIGN')!),
    // SigV4 presigned URLs live at most 7 days.
    presignTtl: parseDuration('SVC_S3_PRESIGN_TTL', raw(env, 'SVC_S3_PRESIGN_TTL')!, 60, 604_800),
    deadline: parseDuration('SVC_S3_DEADLINE', raw(env, 'SVC_S3_DEADLINE')!, 1, 300),
    credentials: loadAwsCredentials(env, region),
  };
}

/** A standard AWS variable: trimmed, null when unset or empty. */
function aws(env: Env, name: string): string | null {
  const v = env[name]?.trim();
  return v === undefined || v === '' ? null : v;
}

/** Link-local and loopback hosts the SDKs let AWS_CONTAINER_CREDENTIALS_FULL_URI reach over plain http. */
const CONTAINER_HTTP_HOSTS = new Set(['169.254.170.2', '169.254.170.23', '[fd00:ec2::23]', 'localhost', '[::1]']);

/**
 * The AWS default credential chain's settings from the standard AWS_* variables (docs/s3.md
 * "Credentials"); the same names and defaults as the AWS SDKs, so a node set up for the AWS CLI
 * (instance profile, IRSA, ECS task role, Pod Identity, a profile) needs nothing more.
 */
export function loadAwsCredentials(env: Env, bucketRegion: string): AwsCredentialsConfig {
  const accessKeyId = aws(env, 'AWS_ACCESS_KEY_ID');
  const secretAccessKey = aws(env, 'AWS_SECRET_ACCESS_KEY');
  if ((accessKeyId === null) !== (secretAccessKey === null)) throw new ConfigError('AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together');

  const home = aws(env, 'HOME');
  const filePath = (name: string, fallback: string): string | null => {
    const v = aws(env, name);
    if (v === null) return home === null ? null : join(home, fallback);
    if (v.startsWith('~/')) return home === null ? null : join(home, v.slice(2));
    return resolve(v);
  };
  const profile = aws(env, 'AWS_PROFILE');
  if (profile !== null && !/^[^\s[\]]{1,128}$/.test(profile)) throw new ConfigError(`AWS_PROFILE must be a profile name without spaces or brackets, got "${profile}"`);

  const imdsDisabled = parseBoolean('AWS_EC2_METADATA_DISABLED', aws(env, 'AWS_EC2_METADATA_DISABLED') ?? 'false');
  const imdsMode = aws(env, 'AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE') ?? 'IPv4';
  if (!/^ipv[46]$/i.test(imdsMode)) throw new ConfigError(`AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE must be IPv4 or IPv6, got "${imdsMode}"`);
  const imdsEndpoint = aws(env, 'AWS_EC2_METADATA_SERVICE_ENDPOINT');

  return {
    static: accessKeyId === null ? null : { accessKeyId, secretAccessKey: secretAccessKey!, sessionToken: aws(env, 'AWS_SESSION_TOKEN') },
    webIdentity: loadWebIdentity(env, bucketRegion),
    sharedFiles: {
      credentialsFile: filePath('AWS_SHARED_CREDENTIALS_FILE', '.aws/credentials'),
      configFile: filePath('AWS_CONFIG_FILE', '.aws/config'),
      profile: profile ?? 'default',
      profileNamed: profile !== null,
    },
    container: loadContainer(env),
    imds: imdsDisabled
      ? null
      : { endpoint: imdsEndpoint !== null ? parseHttpUrl('AWS_EC2_METADATA_SERVICE_ENDPOINT', imdsEndpoint) : /^ipv6$/i.test(imdsMode) ? 'http://[fd00:ec2::254]' : 'http://169.254.169.254' },
  };
}

function loadWebIdentity(env: Env, bucketRegion: string): AwsWebIdentityConfig | null {
  const tokenFile = aws(env, 'AWS_WEB_IDENTITY_TOKEN_FILE');
  const roleArn = aws(env, 'AWS_ROLE_ARN');
  if (tokenFile === null && roleArn === null) return null;
  if (tokenFile === null || roleArn === null) throw new ConfigError('AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN must be set together');
  if (!/^arn:aws[a-z-]*:iam::\d{12}:role\/[\w+=,.@\/-]{1,512}$/.test(roleArn)) {
    throw new ConfigError(`AWS_ROLE_ARN must be an IAM role ARN such as arn:aws:iam::123456789012:role/stowage, got "${roleArn}"`);
  }
  const sessionName = aws(env, 'AWS_ROLE_SESSION_NAME');
  if (sessionName !== null && !/^[\w+=,.@-]{2,64}$/.test(sessionName)) {
    throw new ConfigError(`AWS_ROLE_SESSION_NAME must be 2-64 of A-Z a-z 0-9 _ + = , . @ -, got "${sessionName}"`);
  }
  const region = aws(env, 'AWS_REGION') ?? aws(env, 'AWS_DEFAULT_REGION') ?? bucketRegion;
  if (!/^[a-z0-9-]{1,50}$/.test(region)) throw new ConfigError(`AWS_REGION must be a region name such as us-east-1, got "${region}"`);
  const sts = aws(env, 'AWS_ENDPOINT_URL_STS');
  return {
    tokenFile: isAbsolute(tokenFile) ? tokenFile : resolve(tokenFile),
    roleArn,
    sessionName,
    stsEndpoint: sts !== null ? parseHttpUrl('AWS_ENDPOINT_URL_STS', sts) : `https://sts.${region}.amazonaws.com`,
  };
}

function loadContainer(env: Env): AwsContainerConfig | null {
  const relative = aws(env, 'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI');
  const full = aws(env, 'AWS_CONTAINER_CREDENTIALS_FULL_URI');
  let url: string;
  if (relative !== null) {
    // The ECS agent's fixed address (the SDKs take the relative URI first).
    if (!/^\/[\x21-\x7e]*$/.test(relative)) throw new ConfigError(`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI must be a path starting with /, got "${relative}"`);
    url = `http://169.254.170.2${relative}`;
  } else if (full !== null) {
    let parsed: URL;
    try {
      parsed = new URL(full);
    } catch {
      throw new ConfigError(`AWS_CONTAINER_CREDENTIALS_FULL_URI must be an absolute URL, got "${full}"`);
    }
    // As the SDKs: plain http only to loopback or the ECS/EKS agents, a token must not cross a network.
    const loopback = /^127(\.\d{1,3}){3}$/.test(parsed.hostname) || CONTAINER_HTTP_HOSTS.has(parsed.hostname);
    if (!(parsed.protocol === 'https:' || (parsed.protocol === 'http:' && loopback))) {
      throw new ConfigError(`AWS_CONTAINER_CREDENTIALS_FULL_URI must use https, or http to a loopback address or the ECS/EKS agent (169.254.170.2, 169.254.170.23, fd00:ec2::23), got "${full}"`);
    }
    url = parsed.toString();
  } else {
    return null;
  }
  const tokenFile = aws(env, 'AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE');
  return { url, token: aws(env, 'AWS_CONTAINER_AUTHORIZATION_TOKEN'), tokenFile: tokenFile === null ? null : resolve(tokenFile) };
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

/** Environment → validated, fully defaulted, deep-frozen Config. Throws ConfigError with the exact reason. */
export function loadConfig(env: Env): Config {
  const port = parseInteger('SVC_PORT', raw(env, 'SVC_PORT')!, 0, 65535);
  const baseUrlRaw = raw(env, 'SVC_BASE_URL');
  const baseUrl = baseUrlRaw === null ? null : parseHttpUrl('SVC_BASE_URL', baseUrlRaw);

  const provider = parseProvider(raw(env, 'SVC_AUTH')!);
  const forgeC = raw(env, 'SVC_FORGE_C_API_URL');
  if ((provider === 'forge_c' || provider === 'forge_d') && forgeC === null) {
    throw new ConfigError(`SVC_FORGE_C_API_URL is required when SVC_AUTH=${provider}; it has no default`);
  }
  const cacheTtl = parseDuration('SVC_AUTH_CACHE_TTL', raw(env, 'SVC_AUTH_CACHE_TTL')!, 1, 86400);
  const rejectionTtl = parseDuration('SVC_AUTH_REJECTION_TTL', raw(env, 'SVC_AUTH_REJECTION_TTL')!, 0, 86400);
  if (rejectionTtl >= cacheTtl) {
    throw new ConfigError(`SVC_AUTH_REJECTION_TTL (${rejectionTtl}s) must be shorter than SVC_AUTH_CACHE_TTL (${cacheTtl}s)`);
  }
  const appId = raw(env, 'SVC_FORGE_A_APP_ID');
  const appKeyFile = raw(env, 'SVC_FORGE_A_APP_KEY_FILE');
  if ((appId === null) !== (appKeyFile === null)) {
    throw new ConfigError('SVC_FORGE_A_APP_ID and SVC_FORGE_A_APP_KEY_FILE must be set together');
  }
  if (appId !== null && !/^[A-Za-z0-9._-]{1,100}$/.test(appId)) {
    throw new ConfigError(`SVC_FORGE_A_APP_ID must be the app's id or client id, got "${appId}"`);
  }
  if (appKeyFile !== null) checkPrivateKeyFile('SVC_FORGE_A_APP_KEY_FILE', resolve(appKeyFile));
  const workersRaw = raw(env, 'SVC_WORKERS');
  const lockMaxAgeRaw = raw(env, 'SVC_LOCK_MAX_AGE');
  const adminRepo = raw(env, 'SVC_ADMIN_REPO');
  if (adminRepo !== null) {
    const [org, repo, ...rest] = adminRepo.split('/');
    if (org === undefined || repo === undefined || rest.length > 0 || parseRepoName(org, repo) === null) {
      throw new ConfigError(`SVC_ADMIN_REPO must name one repository as org/repo, got "${adminRepo}"`);
    }
  }
  const allowedRaw = raw(env, 'SVC_ALLOWED_REPOS');
  const store = raw(env, 'SVC_STORE')!;
  if (store !== 'disk' && store !== 's3') throw new ConfigError(`SVC_STORE must be disk or s3, got "${store}"`);
  const compressionLevel = parseCompression(raw(env, 'SVC_COMPRESSION')!);
  const encryption = parseEncryption(raw(env, 'SVC_ENCRYPTION'), raw(env, 'SVC_ENCRYPTION_KEY_FILE'), raw(env, 'SVC_ENCRYPTION_KEY_COMMAND'), raw(env, 'SVC_ENCRYPTION_CIPHER')!);
  const importDirRaw = raw(env, 'SVC_IMPORT_DIR');
  const tusPortRaw = raw(env, 'SVC_TUS_PORT');

  const config: Config = {
    host: raw(env, 'SVC_HOST')!,
    port,
    baseUrl,
    dataDir: resolve(raw(env, 'SVC_DATA_DIR')!),
    databaseUrl: parseDatabaseUrl(raw(env, 'SVC_DATABASE_URL')),
    indexDeadline: parseDuration('SVC_INDEX_DEADLINE', raw(env, 'SVC_INDEX_DEADLINE')!, 1, 300),
    auth: {
      provider,
      forgeAApiUrl: parseHttpUrl('SVC_FORGE_A_API_URL', raw(env, 'SVC_FORGE_A_API_URL')!),
      forgeBApiUrl: parseHttpUrl('SVC_FORGE_B_API_URL', raw(env, 'SVC_FORGE_B_API_URL')!),
      forgeCApiUrl: forgeC === null ? null : parseHttpUrl('SVC_FORGE_C_API_URL', forgeC),
      cacheTtl,
      rejectionTtl,
      lookupBudget: parseInteger('SVC_AUTH_LOOKUP_BUDGET', raw(env, 'SVC_AUTH_LOOKUP_BUDGET')!, 1, 1_000_000),
      cacheEntries: parseInteger('SVC_AUTH_CACHE_ENTRIES', raw(env, 'SVC_AUTH_CACHE_ENTRIES')!, 16, 10_000_000),
      forgeTimeout: parseDuration('SVC_FORGE_TIMEOUT', raw(env, 'SVC_FORGE_TIMEOUT')!, 1, 300),
      forgeAAppId: appId,
      forgeAAppKeyFile: appKeyFile === null ? null : resolve(appKeyFile),
    },
    shutdownGrace: parseDuration('SVC_SHUTDOWN_GRACE', raw(env, 'SVC_SHUTDOWN_GRACE')!, 0, 86400),
    stagingMaxAge: parseDuration('SVC_STAGING_MAX_AGE', raw(env, 'SVC_STAGING_MAX_AGE')!, 60, 365 * 86400),
    chunkedUploadThreshold: parseSize('SVC_CHUNKED_UPLOAD_THRESHOLD', raw(env, 'SVC_CHUNKED_UPLOAD_THRESHOLD')!, 0, 1_000_000_000),
    workers: workersRaw === null ? availableParallelism() : parseInteger('SVC_WORKERS', workersRaw, 1, 256),
    compressionLevel,
    encryption,
    diskReserve: parseSize('SVC_DISK_RESERVE', raw(env, 'SVC_DISK_RESERVE')!, 0, 2 ** 50),
    directIo: parseBoolean('SVC_DIRECT_IO', raw(env, 'SVC_DIRECT_IO')!),
    logRequests: parseBoolean('SVC_LOG_REQUESTS', raw(env, 'SVC_LOG_REQUESTS')!),
    metricsToken: parseMetricsToken(raw(env, 'SVC_METRICS_TOKEN')),
    trustProxy: parseBoolean('SVC_TRUST_PROXY', raw(env, 'SVC_TRUST_PROXY')!),
    lockMaxAge: lockMaxAgeRaw === null ? null : parseDuration('SVC_LOCK_MAX_AGE', lockMaxAgeRaw, 1, 10 * 365 * 86400),
    access: {
      anonymousRead: parseBoolean('SVC_ANONYMOUS_READ', raw(env, 'SVC_ANONYMOUS_READ')!),
      allowedRepos: allowedRaw === null ? [] : parseRepoPatterns('SVC_ALLOWED_REPOS', allowedRaw),
      maxObjectSize: parseSize('SVC_MAX_OBJECT_SIZE', raw(env, 'SVC_MAX_OBJECT_SIZE')!, 0, 2 ** 50),
      repoQuota: parseSize('SVC_REPO_QUOTA', raw(env, 'SVC_REPO_QUOTA')!, 0, 2 ** 53 - 1),
    },
    adminRepo,
    sessionTtl: parseDuration('SVC_SESSION_TTL', raw(env, 'SVC_SESSION_TTL')!, 60, 30 * 86400),
    store,
    s3: loadS3(env, store),
    gcGrace: parseDuration('SVC_GC_GRACE', raw(env, 'SVC_GC_GRACE')!, 0, 10 * 365 * 86400),
    rewrapBatch: parseInteger('SVC_REWRAP_BATCH', raw(env, 'SVC_REWRAP_BATCH')!, 1, 100_000),
    importDir: importDirRaw === null ? null : resolve(importDirRaw),
    tusPort: tusPortRaw === null ? null : parseInteger('SVC_TUS_PORT', tusPortRaw, 0, 65535),
    uploadResumeTtl: parseDuration('SVC_UPLOAD_RESUME_TTL', raw(env, 'SVC_UPLOAD_RESUME_TTL')!, 1, 365 * 86400),
    cache: loadCache(env),
  };
  return deepFreeze(config);
}

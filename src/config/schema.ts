/**
 * The one table of configuration: every SVC_ variable, its type, its default and what it means.
 * `load.ts` turns the environment into a validated, frozen `Config` from this table; the README's
 * configuration table mirrors it (test/unit/docs-parity.test.ts keeps the two in step).
 */

export type ForgeProvider = 'forge_a' | 'forge_b' | 'forge_c' | 'forge_d';

/** SVC_AUTH also takes the forges' own names (forge_d is Forgejo, which answers as Gitea does). */
export const PROVIDER_ALIASES: Readonly<Record<string, ForgeProvider>> = { github: 'forge_a', gitlab: 'forge_b', gitea: 'forge_c', forgejo: 'forge_d' };

export interface Config {
  /** Address the HTTP listener binds. */
  readonly host: string;
  readonly port: number;
  /**
   * Public URL of this server, used to build batch links; never ends with a slash. Null when unset:
   * then it is http://{host}:{bound port} (localhost for a wildcard host), known once listening.
   */
  readonly baseUrl: string | null;
  /** Root of the disk store and the SQLite index. */
  readonly dataDir: string;
  /**
   * The PostgreSQL index shared by every node (SVC_DATABASE_URL, postgres:// or postgresql://);
   * null: the embedded SQLite index in dataDir. Holds the password: never log it (redactDatabaseUrl).
   */
  readonly databaseUrl: string | null;
  /**
   * Seconds an index call may go unanswered before the request gets 503 + Retry-After
   * (SVC_INDEX_DEADLINE; docs/cluster.md): a silent PostgreSQL must not hold requests. PostgreSQL only.
   */
  readonly indexDeadline: number;
  readonly auth: {
    readonly provider: ForgeProvider;
    readonly forgeAApiUrl: string;
    readonly forgeBApiUrl: string;
    readonly forgeCApiUrl: string | null;
    /** Seconds a granted answer is cached. */
    readonly cacheTtl: number;
    /** Seconds a refusal is cached; always shorter than cacheTtl. */
    readonly rejectionTtl: number;
    /** Uncached forge lookups per minute, for the whole server. */
    readonly lookupBudget: number;
    /** Most (token, repository) answers kept in memory. */
    readonly cacheEntries: number;
    /** Seconds before a forge request is given up. */
    readonly forgeTimeout: number;
    readonly forgeAAppId: string | null;
    readonly forgeAAppKeyFile: string | null;
  };
  /** Seconds in-flight requests get to finish after SIGTERM/SIGINT. */
  readonly shutdownGrace: number;
  /** Staging files older than this many seconds are litter, swept hourly (every one is swept at start). */
  readonly stagingMaxAge: number;
  /** Objects of this size or more are uploaded chunked (the uWS build resets 10-digit Content-Length). */
  readonly chunkedUploadThreshold: number;
  /** Piscina pool size. */
  readonly workers: number;
  /** zstd level for new objects (SVC_COMPRESSION=zstd[:level]), or null when off. */
  readonly compressionLevel: number | null;
  /** Encryption at rest (docs/encryption.md). */
  readonly encryption: EncryptionConfig;
  /**
   * Bytes of free space on the data directory's file system that new object bytes never take
   * (SVC_DISK_RESERVE; docs/durability.md): left for the index, the journal and maintenance, so
   * retain can still free a store that uploads filled. 0 = none. Disk store only.
   */
  readonly diskReserve: number;
  /** Large uploads are written with O_DIRECT, past the page cache (SVC_DIRECT_IO). */
  readonly directIo: boolean;
  /** Log every request as a JSON line on stdout. */
  readonly logRequests: boolean;
  /**
   * SVC_METRICS_TOKEN: the bearer token that unlocks the store-wide series of /metrics (they tell
   * whether the store already held an object); null: those series are never exposed. A secret: never logged.
   */
  readonly metricsToken: string | null;
  /**
   * A reverse proxy in front sets X-Forwarded-For (SVC_TRUST_PROXY): request lines then name the
   * address it appended (the last one) as the client instead of the proxy's own address.
   */
  readonly trustProxy: boolean;
  /** Seconds after which a lock is stale and anyone with push may take it over; null (unset) = never. */
  readonly lockMaxAge: number | null;
  /**
   * Defaults of the access settings the dashboard edits. Saved settings in SQLite override
   * them; DELETE /-/api/access returns to these.
   */
  readonly access: {
    /** Anonymous (token-less) reads of public repositories. */
    readonly anonymousRead: boolean;
    /** Organisations or `org/repo` patterns (`*` wildcards) served; empty = all. */
    readonly allowedRepos: readonly string[];
    /** Largest object accepted, in bytes; 0 = no limit. */
    readonly maxObjectSize: number;
    /** Logical bytes one repository may hold; 0 = no limit. */
    readonly repoQuota: number;
  };
  /** Repository whose admins may use the dashboard (besides forge site admins); null = site admins only. */
  readonly adminRepo: string | null;
  /** Seconds a dashboard session lasts. */
  readonly sessionTtl: number;
  /** Seconds during which retain never takes an object uploaded or referenced (docs/maintenance.md); 0 = no grace. */
  readonly gcGrace: number;
  /** Where objects live: the local disk under dataDir (SVC_STORE=disk) or an S3-compatible bucket (s3). */
  readonly store: 'disk' | 's3';
  /** The bucket (docs/s3.md) when store is 's3'; null otherwise. */
  readonly s3: S3Config | null;
  /**
   * The only folder `import` may read other servers' content folders from (absolute); requests name
   * a folder inside it. Null (unset): imports are off.
   */
  readonly importDir: string | null;
  /**
   * Port of the resumable-upload listener (SVC_TUS_PORT; docs/resumable-uploads.md): tus uploads are
   * offered only when it is set (0: any free port). Null: off, every upload is `basic`.
   */
  readonly tusPort: number | null;
  /** Seconds a partial resumable upload is kept after its last byte arrived (SVC_UPLOAD_RESUME_TTL). */
  readonly uploadResumeTtl: number;
  /** Cache mode (docs/cache.md): the upstream LFS endpoint and the cache's bounds; null: an ordinary server. */
  readonly cache: CacheConfig | null;
  /** Data-key rows the rewrap job reads per index query (SVC_REWRAP_BATCH). */
  readonly rewrapBatch: number;
}

/** SVC_UPSTREAM_LFS_URL and SVC_CACHE_* (docs/cache.md). */
export interface CacheConfig {
  /** The upstream's LFS endpoint, with `{org}` and `{repo}` where the repository's names go. */
  readonly upstreamTemplate: string;
  /** Bytes of objects the cache keeps before it evicts the least recently used. */
  readonly maxSize: number;
  /** Signs the cache's links; null: a random secret per process (links die with a restart). */
  readonly linkSecret: string | null;
}

/** SVC_S3_* and the standard AWS credential variables (docs/s3.md). */
export interface S3Config {
  readonly bucket: string;
  /** Endpoint origin (MinIO, Ceph RGW, R2 …); https://s3.{region}.amazonaws.com when unset. */
  readonly endpoint: string;
  readonly region: string;
  /** Key prefix inside the bucket: '' or ending with '/'. */
  readonly prefix: string;
  /** Path-style addressing (endpoint/bucket/key) instead of virtual-hosted (bucket.endpoint/key). */
  readonly pathStyle: boolean;
  /** Batch links are presigned bucket URLs (docs/behaviour.md, "Object storage (S3)"). */
  readonly presign: boolean;
  /** Base lifetime of a presigned link in seconds; large objects get longer (see PresignService). */
  readonly presignTtl: number;
  /**
   * Seconds the bucket may stay silent (SVC_S3_DEADLINE; docs/s3.md): to connect, to answer a request
   * (plus 1 s per MiB it sends), and between two pieces of an answer's body.
   */
  readonly deadline: number;
  /** Where the bucket's credentials come from: the AWS default chain, from the AWS_* variables (docs/s3.md). */
  readonly credentials: AwsCredentialsConfig;
}

/**
 * The AWS SDKs' default credential chain as the standard AWS_* variables set it up, in its order
 * (docs/s3.md "Credentials"). Holds secrets: never logged.
 */
export interface AwsCredentialsConfig {
  /** AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN; null when unset. */
  readonly static: { readonly accessKeyId: string; readonly secretAccessKey: string; readonly sessionToken: string | null } | null;
  /** AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN; null when unset. */
  readonly webIdentity: AwsWebIdentityConfig | null;
  readonly sharedFiles: AwsSharedFilesConfig;
  /** AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI; null when unset. */
  readonly container: AwsContainerConfig | null;
  /** EC2 instance metadata; null when AWS_EC2_METADATA_DISABLED=true. */
  readonly imds: AwsImdsConfig | null;
}

/** STS AssumeRoleWithWebIdentity with a token file (EKS IAM roles for service accounts). */
export interface AwsWebIdentityConfig {
  /** AWS_WEB_IDENTITY_TOKEN_FILE (absolute), read again at every refresh. */
  readonly tokenFile: string;
  /** AWS_ROLE_ARN. */
  readonly roleArn: string;
  /** AWS_ROLE_SESSION_NAME; null: one is made from the time. */
  readonly sessionName: string | null;
  /** AWS_ENDPOINT_URL_STS, else https://sts.{AWS_REGION, AWS_DEFAULT_REGION or SVC_S3_REGION}.amazonaws.com. */
  readonly stsEndpoint: string;
}

/** The shared credentials and config files (static keys of one profile). */
export interface AwsSharedFilesConfig {
  /** AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials; null without HOME. */
  readonly credentialsFile: string | null;
  /** AWS_CONFIG_FILE, else ~/.aws/config; null without HOME. */
  readonly configFile: string | null;
  /** AWS_PROFILE, else `default`. */
  readonly profile: string;
  /** AWS_PROFILE was set: then the profile must exist. */
  readonly profileNamed: boolean;
}

/** The container credentials endpoint (ECS task roles, EKS Pod Identity). */
export interface AwsContainerConfig {
  /** http://169.254.170.2{AWS_CONTAINER_CREDENTIALS_RELATIVE_URI}, or AWS_CONTAINER_CREDENTIALS_FULL_URI. */
  readonly url: string;
  /** AWS_CONTAINER_AUTHORIZATION_TOKEN, sent as Authorization; null when unset. */
  readonly token: string | null;
  /** AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (wins over the token), read at every refresh. */
  readonly tokenFile: string | null;
}

/** EC2 instance metadata (IMDSv2). */
export interface AwsImdsConfig {
  /** Origin: AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254 (http://[fd00:ec2::254] with AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6). */
  readonly endpoint: string;
}

/** Where the key ring comes from (at most one of the two), and whether new objects are encrypted. */
export interface EncryptionConfig {
  /** SVC_ENCRYPTION_KEY_FILE: one `<id> <base64 key>` per line, readable by its owner only. */
  readonly keyFile: string | null;
  /** SVC_ENCRYPTION_KEY_COMMAND: a command (run with /bin/sh) that prints the same format. */
  readonly keyCommand: string | null;
  /** SVC_ENCRYPTION: new objects are encrypted; false still reads encrypted ones while the keys are given. */
  readonly encryptNew: boolean;
  /** SVC_ENCRYPTION_CIPHER: `auto` (the CPU's vector AES-GCM where it has one) or `openssl` only. */
  readonly cipher: 'auto' | 'openssl';
}

/** Defaults, one place (fastify defaultInitOptions). `null` means "no default". */
export const DEFAULTS = {
  SVC_HOST: '0.0.0.0',
  SVC_PORT: '8080',
  SVC_BASE_URL: null, // http://localhost:$SVC_PORT (the bound port)
  SVC_DATA_DIR: './data',
  SVC_DATABASE_URL: null, // the embedded SQLite index in SVC_DATA_DIR
  SVC_INDEX_DEADLINE: '5', // well under git-lfs's 30 s activity timeout
  SVC_AUTH: 'forge_a',
  SVC_FORGE_A_API_URL: 'https://api.github.com',
  SVC_FORGE_B_API_URL: 'https://gitlab.com/api/v4',
  SVC_FORGE_C_API_URL: null,
  SVC_AUTH_CACHE_TTL: '300',
  SVC_AUTH_REJECTION_TTL: '30',
  SVC_AUTH_LOOKUP_BUDGET: '600',
  SVC_AUTH_CACHE_ENTRIES: '100000',
  SVC_FORGE_TIMEOUT: '10',
  SVC_FORGE_A_APP_ID: null,
  SVC_FORGE_A_APP_KEY_FILE: null,
  SVC_SHUTDOWN_GRACE: '30',
  SVC_STAGING_MAX_AGE: '86400',
  SVC_CHUNKED_UPLOAD_THRESHOLD: '1000000000',
  SVC_WORKERS: null, // number of cores
  SVC_COMPRESSION: 'off',
  SVC_ENCRYPTION: null, // on when a key file or command is given, off otherwise
  SVC_ENCRYPTION_KEY_FILE: null,
  SVC_ENCRYPTION_KEY_COMMAND: null,
  SVC_ENCRYPTION_CIPHER: 'auto',
  SVC_DISK_RESERVE: '128MiB', // the index's WAL up to its checkpoint mark, a journal segment's retirement, margin (docs/durability.md)
  SVC_DIRECT_IO: 'true',
  SVC_LOG_REQUESTS: 'false',
  SVC_METRICS_TOKEN: null, // store-wide series of /metrics are left out
  SVC_TRUST_PROXY: 'false', // true only behind a proxy that sets X-Forwarded-For (anyone can send one)
  SVC_LOCK_MAX_AGE: null, // locks never go stale
  SVC_ANONYMOUS_READ: 'true',
  SVC_ALLOWED_REPOS: null, // empty: every repository
  SVC_MAX_OBJECT_SIZE: '0', // 0: no limit
  SVC_REPO_QUOTA: '0', // 0: no limit
  SVC_ADMIN_REPO: null, // only forge site admins may sign in to the dashboard
  SVC_SESSION_TTL: '8h',
  SVC_STORE: 'disk',
  SVC_S3_BUCKET: null, // required when SVC_STORE=s3
  SVC_S3_ENDPOINT: null, // https://s3.{region}.amazonaws.com
  SVC_S3_REGION: 'us-east-1',
  SVC_S3_PREFIX: null, // keys at the bucket's root
  SVC_S3_PATH_STYLE: 'false',
  SVC_S3_PRESIGN: 'false',
  SVC_S3_PRESIGN_TTL: '1h',
  SVC_S3_DEADLINE: '10',
  SVC_GC_GRACE: '14d', // retain never takes what was uploaded or referenced this recently
  SVC_REWRAP_BATCH: '500',
  SVC_IMPORT_DIR: null, // imports are off
  SVC_TUS_PORT: null, // resumable (tus) uploads are off
  SVC_UPLOAD_RESUME_TTL: '3d',
  SVC_UPSTREAM_LFS_URL: null, // an ordinary server, not a cache
  SVC_CACHE_MAX_SIZE: '10GiB',
  SVC_CACHE_LINK_SECRET: null, // a random secret per process
} as const satisfies Record<string, string | null>;

export type ConfigVariable = keyof typeof DEFAULTS;

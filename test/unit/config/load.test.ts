import t from 'tap';
import { ConfigError, configWarnings, levenshtein, loadConfig, parseDuration, parseSize, redactDatabaseUrl } from '../../../src/config/load.js';

t.test('defaults', async (t) => {
  const c = loadConfig({});
  t.equal(c.host, '0.0.0.0');
  t.equal(c.port, 8080);
  t.equal(c.baseUrl, null, 'derived from the bound port once listening');
  t.match(c.dataDir, /\/data$/);
  t.equal(c.auth.provider, 'forge_a');
  t.equal(c.auth.forgeAApiUrl, 'https://api.github.com');
  t.ok(c.auth.rejectionTtl < c.auth.cacheTtl);
  t.equal(c.chunkedUploadThreshold, 1_000_000_000);
  t.equal(c.directIo, true, 'large uploads go past the page cache unless told otherwise');
  t.equal(c.diskReserve, 128 << 20, 'uploads stop with 128 MiB still free');
  t.ok(Object.isFrozen(c) && Object.isFrozen(c.auth), 'deep-frozen');
});

t.test('explicit values', async (t) => {
  const c = loadConfig({ SVC_PORT: '9000', SVC_BASE_URL: 'https://lfs.example.com/', SVC_AUTH_CACHE_TTL: '10m', SVC_AUTH_REJECTION_TTL: '45s' });
  t.equal(c.port, 9000);
  t.equal(c.baseUrl, 'https://lfs.example.com', 'trailing slash dropped');
  t.equal(c.auth.cacheTtl, 600);
  t.equal(c.auth.rejectionTtl, 45);
  t.equal(loadConfig({ SVC_DIRECT_IO: 'false' }).directIo, false);
  t.equal(loadConfig({ SVC_DISK_RESERVE: '2GiB' }).diskReserve, 2 * 2 ** 30, 'the reserve takes a size');
  t.equal(loadConfig({ SVC_DISK_RESERVE: '0' }).diskReserve, 0, '0 turns it off');
});

const refusals: [Record<string, string>, RegExp][] = [
  [{ SVC_PORT: 'eighty' }, /SVC_PORT must be a whole number/],
  [{ SVC_DISK_RESERVE: 'lots' }, /SVC_DISK_RESERVE must be a size/],
  [{ SVC_PORT: '70000' }, /SVC_PORT must be between 0 and 65535/],
  [{ SVC_BASE_URL: 'ftp://x' }, /SVC_BASE_URL must use http or https/],
  [{ SVC_BASE_URL: 'not a url' }, /SVC_BASE_URL must be an absolute/],
  [{ SVC_BASE_URL: 'http://x/?a=1' }, /query or fragment/],
  [{ SVC_AUTH: 'forge_x' }, /^SVC_AUTH must be one of forge_a, forge_b, forge_c, forge_d or github \(forge_a\), gitlab \(forge_b\), gitea \(forge_c\), forgejo \(forge_d\), got "forge_x"$/],
  [{ SVC_AUTH: 'bitbucket' }, /SVC_AUTH must be one of .*, got "bitbucket"/],
  [{ SVC_AUTH: 'gitea' }, /SVC_FORGE_C_API_URL is required when SVC_AUTH=forge_c/],
  [{ SVC_TRUST_PROXY: 'sometimes' }, /^SVC_TRUST_PROXY must be true or false, got "sometimes"$/],
  [{ SVC_AUTH: 'forge_c' }, /SVC_FORGE_C_API_URL is required when SVC_AUTH=forge_c/],
  [{ SVC_AUTH: 'forge_d' }, /SVC_FORGE_C_API_URL is required when SVC_AUTH=forge_d/],
  [{ SVC_AUTH_CACHE_TTL: '30', SVC_AUTH_REJECTION_TTL: '30' }, /must be shorter than SVC_AUTH_CACHE_TTL/],
  [{ SVC_AUTH_LOOKUP_BUDGET: '0' }, /SVC_AUTH_LOOKUP_BUDGET must be between/],
  [{ SVC_FORGE_A_APP_ID: '12' }, /must be set together/],
  [{ SVC_LOG_REQUESTS: 'maybe' }, /SVC_LOG_REQUESTS must be true or false/],
  [{ SVC_DIRECT_IO: 'sometimes' }, /SVC_DIRECT_IO must be true or false/],
  [{ SVC_CHUNKED_UPLOAD_THRESHOLD: '2GiB' }, /SVC_CHUNKED_UPLOAD_THRESHOLD must be between/],
  [{ SVC_REWRAP_BATCH: '0' }, /SVC_REWRAP_BATCH must be between 1 and 100000/],
];
for (const [env, message] of refusals) {
  t.test(`refuses ${JSON.stringify(env)}`, async (t) => {
    t.throws(() => loadConfig(env), ConfigError);
    t.throws(() => loadConfig(env), { message });
  });
}

t.test('size and duration parsers', async (t) => {
  t.equal(parseSize('X', '64KiB', 0, 2 ** 50), 65536);
  t.equal(parseSize('X', '5G', 0, 2 ** 50), 5 * 1024 ** 3);
  t.throws(() => parseSize('X', '5 parsecs', 0, 10));
  t.equal(parseDuration('X', '14d', 0, 10 ** 9), 14 * 86400);
  t.equal(parseDuration('X', '90', 0, 10 ** 9), 90);
  t.throws(() => parseDuration('X', '1w', 0, 10 ** 9));
});

t.test('SVC_REWRAP_BATCH: rows per rewrap query, 500 unless set', async (t) => {
  t.equal(loadConfig({}).rewrapBatch, 500);
  t.equal(loadConfig({ SVC_REWRAP_BATCH: '10' }).rewrapBatch, 10);
});

t.test('SVC_IMPORT_DIR: unset means imports are off; set, it is made absolute', async (t) => {
  t.equal(loadConfig({}).importDir, null);
  t.equal(loadConfig({ SVC_IMPORT_DIR: 'imports' }).importDir, `${process.cwd()}/imports`);
  t.equal(loadConfig({ SVC_IMPORT_DIR: '/srv/old-lfs/' }).importDir, '/srv/old-lfs');
});

t.test('SVC_AUTH takes the forges\' names', async (t) => {
  t.equal(loadConfig({ SVC_AUTH: 'github' }).auth.provider, 'forge_a');
  t.equal(loadConfig({ SVC_AUTH: 'GitLab' }).auth.provider, 'forge_b', 'in any case');
  t.equal(loadConfig({ SVC_AUTH: 'gitea', SVC_FORGE_C_API_URL: 'https://git.example.com/api/v1' }).auth.provider, 'forge_c');
  t.equal(loadConfig({ SVC_AUTH: 'forgejo', SVC_FORGE_C_API_URL: 'https://git.example.com/api/v1' }).auth.provider, 'forge_d');
  t.equal(loadConfig({ SVC_AUTH: 'forge_b' }).auth.provider, 'forge_b');
});

t.test('SVC_TRUST_PROXY', async (t) => {
  t.equal(loadConfig({}).trustProxy, false, 'off by default: anyone can send X-Forwarded-For');
  t.equal(loadConfig({ SVC_TRUST_PROXY: 'true' }).trustProxy, true);
});

t.test('unknown SVC_ variables are warned about with the nearest known name', async (t) => {
  t.same(configWarnings({ SVC_COMPRESION: 'zstd', PATH: '/bin', SVC_PORT: '1' }), ['SVC_COMPRESION is not a Stowage variable and is ignored; did you mean SVC_COMPRESSION?']);
  t.same(configWarnings({ SVC_LOG_REQUEST: 'true', SVC_DATADIR: '/x' }), [
    'SVC_DATADIR is not a Stowage variable and is ignored; did you mean SVC_DATA_DIR?',
    'SVC_LOG_REQUEST is not a Stowage variable and is ignored; did you mean SVC_LOG_REQUESTS?',
  ], 'every one, in name order');
  t.same(configWarnings({ SVC_HOST: 'x', AWS_REGION: 'eu-west-1', STOWAGE_TOKEN: 'x' }), [], 'known and foreign variables pass');
  t.doesNotThrow(() => loadConfig({ SVC_COMPRESION: 'zstd' }), 'a warning, not an error');
  t.equal(levenshtein('SVC_COMPRESION', 'SVC_COMPRESSION'), 1);
  t.equal(levenshtein('kitten', 'sitting'), 3);
  t.equal(levenshtein('', 'abc'), 3);
});

t.test('SVC_DATABASE_URL: unset is the SQLite index; a postgres URL is kept; anything else refused without its password', async (t) => {
  t.equal(loadConfig({}).databaseUrl, null);
  t.equal(loadConfig({ SVC_DATABASE_URL: 'postgres://stowage:pw@db.internal:5432/stowage' }).databaseUrl, 'postgres://stowage:pw@db.internal:5432/stowage');
  t.equal(loadConfig({ SVC_DATABASE_URL: 'postgresql://db/stowage?sslmode=require' }).databaseUrl, 'postgresql://db/stowage?sslmode=require');
  t.throws(() => loadConfig({ SVC_DATABASE_URL: 'mysql://root:s3cret@db/x' }), {
    message: 'SVC_DATABASE_URL must be a postgres:// or postgresql:// URL with a host, got "mysql://root:***@db/x"',
  });
  t.throws(() => loadConfig({ SVC_DATABASE_URL: 'postgres:///stowage' }), {
    message: 'SVC_DATABASE_URL must be a postgres:// or postgresql:// URL with a host, got "postgres:///stowage"',
  });
  t.throws(() => loadConfig({ SVC_DATABASE_URL: 'db.internal:5432' }), ConfigError);
  for (const url of ['postgres://u:p@ss/w0rd@db/x', 'postgres://u:pw@db/x?password=other', 'u:pw@db']) {
    const shown = redactDatabaseUrl(url);
    t.notMatch(shown, /p@ss|w0rd|other|:pw@/, `${shown}: no password`);
  }
  t.equal(redactDatabaseUrl('postgres://db/stowage'), 'postgres://db/stowage', 'nothing to hide');
  t.equal(redactDatabaseUrl('postgres://u@db:5432/stowage'), 'postgres://u@db:5432/stowage', 'a user alone is shown');
});

t.test('SVC_INDEX_DEADLINE: seconds an index call may go unanswered, 5 by default, 1 to 300', async (t) => {
  t.equal(loadConfig({}).indexDeadline, 5);
  t.equal(loadConfig({ SVC_INDEX_DEADLINE: '2s' }).indexDeadline, 2);
  t.throws(() => loadConfig({ SVC_INDEX_DEADLINE: '0' }), ConfigError);
  t.throws(() => loadConfig({ SVC_INDEX_DEADLINE: '10m' }), ConfigError);
});

t.test('encryption: on when keys are given unless turned off; on without keys, or two key sources, refused', async (t) => {
  t.same(loadConfig({}).encryption, { keyFile: null, keyCommand: null, encryptNew: false, cipher: 'auto' }, 'no keys: off');
  t.match(loadConfig({ SVC_ENCRYPTION_KEY_FILE: 'keys' }).encryption, { keyFile: /\/keys$/, keyCommand: null, encryptNew: true }, 'a key file: on, its path resolved');
  t.match(loadConfig({ SVC_ENCRYPTION_KEY_COMMAND: 'vault read -field=keys kv/lfs' }).encryption, { keyFile: null, keyCommand: 'vault read -field=keys kv/lfs', encryptNew: true });
  t.equal(loadConfig({ SVC_ENCRYPTION_KEY_FILE: 'keys', SVC_ENCRYPTION: 'off' }).encryption.encryptNew, false, 'off with keys: reads encrypted objects, writes plain');
  t.throws(() => loadConfig({ SVC_ENCRYPTION: 'on' }), new ConfigError('SVC_ENCRYPTION=on needs SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND'));
  t.throws(() => loadConfig({ SVC_ENCRYPTION: 'yes', SVC_ENCRYPTION_KEY_FILE: 'keys' }), /SVC_ENCRYPTION must be on or off, got "yes"/);
  t.throws(() => loadConfig({ SVC_ENCRYPTION_KEY_FILE: 'keys', SVC_ENCRYPTION_KEY_COMMAND: 'cat keys' }), /not both/);
  t.equal(loadConfig({ SVC_ENCRYPTION_KEY_FILE: 'keys', SVC_ENCRYPTION_CIPHER: 'openssl' }).encryption.cipher, 'openssl', 'OpenSSL only, when asked');
  t.throws(() => loadConfig({ SVC_ENCRYPTION_CIPHER: 'vaes' }), /SVC_ENCRYPTION_CIPHER must be auto or openssl, got "vaes"/);
});

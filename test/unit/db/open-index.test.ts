import { rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import postgres from 'postgres';
import t from 'tap';
import { openIndex } from '../../../src/db/open-index.js';
import { PG_MIGRATIONS } from '../../../src/db/postgres/migrations/index.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../../helpers/postgres.js';
import { tmpDir } from '../../helpers/start-server.js';

// SVC_DATABASE_URL picks the index: PostgreSQL when set, the SQLite file in the data directory
// otherwise. Either refuses a schema newer than the code, and a failure never shows the password.

const dir = tmpDir('stowage-open-index-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const quiet = (): void => undefined;
// Started before the first subtest (see startPostgres).
const pg = hasPostgres() ? await startPostgres((fn) => t.teardown(fn)) : null;

t.test('no database URL: the SQLite file in the data directory', async (t) => {
  const ix = await openIndex({ dataDir: dir, databaseUrl: null }, quiet);
  t.equal(ix.kind, 'sqlite');
  await ix.close();
  // A newer server migrated this file: an older one must not write it.
  const db = new Database(join(dir, 'index.sqlite'));
  db.pragma('user_version = 99');
  db.close();
  await t.rejects(openIndex({ dataDir: dir, databaseUrl: null }, quiet), /index schema version 99 is newer than this server knows/);
});

if (pg === null) {
  t.fail(POSTGRES_INSTALL_HINT);
} else {

  t.test('a database URL: PostgreSQL, migrated; a newer schema is refused', async (t) => {
    const url = await pg.createDatabase();
    const logs: [string, object][] = [];
    const ix = await openIndex({ dataDir: dir, databaseUrl: url }, (msg, fields) => logs.push([msg, fields]));
    t.equal(ix.kind, 'postgres');
    await ix.ping();
    await ix.close();
    t.match(logs, [...PG_MIGRATIONS.map((m) => ['index migrated', { to: m.name }]), ['index opened', { kind: 'postgres' }]], 'every step, in order');
    const admin = postgres(url, { max: 1, onnotice: () => undefined });
    await admin`UPDATE schema_version SET version = 99`;
    await admin.end();
    await t.rejects(openIndex({ dataDir: dir, databaseUrl: url }, quiet), new RegExp(`index schema version 99 is newer than this server knows \\(${PG_MIGRATIONS.length}\\); refusing to run`));
  });

  t.test('a missing or unreachable database: the reason, the password hidden', async (t) => {
    // The test server trusts loopback (any password passes): a database that does not exist refuses.
    const missing = `postgres://postgres:hunter2@127.0.0.1:${pg.port}/no_such_db`;
    const e = await openIndex({ dataDir: dir, databaseUrl: missing }, quiet).then(
      () => null,
      (err: unknown) => err as Error,
    );
    t.match(e?.message, /^the index database postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/no_such_db cannot be used: database "no_such_db" does not exist$/);
    t.notMatch(e?.message, /hunter2/);
    const refused = await openIndex({ dataDir: dir, databaseUrl: 'postgres://u:hunter2@127.0.0.1:1/x' }, quiet).then(
      () => null,
      (err: unknown) => err as Error,
    );
    t.match(refused?.message, /^the index database postgres:\/\/u:\*\*\*@127\.0\.0\.1:1\/x cannot be used: connect ECONNREFUSED/);
    t.equal((refused?.cause as { code?: string }).code, 'ECONNREFUSED', 'the cause kept for the storage-fault mapping');
  });
}

import postgres from 'postgres';
import t from 'tap';
import { PostgresIndex } from '../../../src/db/postgres/postgres-index.js';
import { storageFault } from '../../../src/errors/storage-fault.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../../helpers/postgres.js';
import { waitFor } from '../../helpers/wait-for.js';

// The errors the PostgreSQL client really throws when the index database is down, going down,
// refusing or full, caught from a real server, and what the HTTP boundary makes of them: 503
// LFS_ERR_NOT_READY with Retry-After (a balancer or the client retries; nothing acknowledged is
// lost), 507 for a full disk, and nothing (a plain 500) for errors that are bugs, not outages.

/** What the boundary answers for `e`: status, code and Retry-After, or null when it is not a storage fault. */
function mapped(e: unknown): { status: number; code: string; retryAfter: string | undefined } | null {
  const f = storageFault(e);
  return f === null ? null : { status: f.status, code: f.code, retryAfter: f.headers['Retry-After'] };
}

const NOT_READY = { status: 503, code: 'LFS_ERR_NOT_READY', retryAfter: '30' };

/** The rejection of `p` (fails the test when it resolves). */
async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error('expected a rejection');
}

if (!hasPostgres()) {
  t.fail(POSTGRES_INSTALL_HINT);
} else {
  const pg = await startPostgres((fn) => t.teardown(fn));
  const url = await pg.createDatabase();
  const admin = postgres(pg.url('postgres'), { max: 1, onnotice: () => undefined });
  t.teardown(() => admin.end({ timeout: 0 }));

  t.test('a session terminated by the server (57P01, or the closed connection) is 503 with Retry-After', async (t) => {
    const client = postgres(url, { max: 1, onnotice: () => undefined });
    t.teardown(() => client.end({ timeout: 0 }));
    const sleeping = rejection(client`SELECT pg_sleep(60)`);
    await waitFor(async () => (await admin`SELECT 1 FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'`).length === 1, 'the query to be running');
    await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND pid <> pg_backend_pid()`;
    const e = await sleeping;
    // The server sends FATAL 57P01 and closes; the client reports one or the other, by timing.
    t.ok(['57P01', 'CONNECTION_CLOSED'].includes((e as { code?: string }).code ?? ''), `terminated: ${(e as { code?: string }).code}`);
    t.same(mapped(e), NOT_READY);
  });

  t.test('a role past its connection limit (53300) is 503', async (t) => {
    await admin`CREATE ROLE limited LOGIN CONNECTION LIMIT 0`;
    const client = postgres(url.replace('postgres@', 'limited@'), { max: 1, onnotice: () => undefined });
    t.teardown(() => client.end({ timeout: 0 }));
    const e = await rejection(client`SELECT 1`);
    t.equal((e as { code?: string }).code, '53300', 'too_many_connections');
    t.same(mapped(e), NOT_READY);
  });

  t.test('errors that are bugs, not outages, are not storage faults', async (t) => {
    const client = postgres(url, { max: 1, onnotice: () => undefined });
    t.teardown(() => client.end({ timeout: 0 }));
    const e = await rejection(client`SELECT * FROM no_such_table`);
    t.equal((e as { code?: string }).code, '42P01');
    t.equal(mapped(e), null, 'undefined_table stays a 500');
    await client`CREATE TABLE u (k INT PRIMARY KEY)`;
    await client`INSERT INTO u VALUES (1)`;
    t.equal(mapped(await rejection(client`INSERT INTO u VALUES (1)`)), null, 'unique_violation stays a 500');
  });

  t.test('a full disk on the database server (53100) is 507', async (t) => {
    // The server cannot be made to fill its disk here: the error is built as the client builds it
    // from the server's ErrorResponse.
    const e = new postgres.PostgresError({ message: 'could not extend file "base/16384/16385": No space left on device', code: '53100', severity: 'ERROR' } as never);
    t.same(mapped(e), { status: 507, code: 'LFS_ERR_STORAGE_FULL', retryAfter: undefined });
    t.same(mapped(Object.assign(new Error('x'), { code: '08006' })), NOT_READY, 'connection_failure (class 08)');
    t.same(mapped(Object.assign(new Error('x'), { code: '57P03' })), NOT_READY, 'cannot_connect_now (starting up)');
  });

  // Last: stops the server.
  t.test('the index while the database is stopping and stopped: 503; back once it is up', async (t) => {
    const ix = await PostgresIndex.open(url);
    t.teardown(() => ix.close());
    await ix.ping();
    const client = postgres(url, { max: 1, onnotice: () => undefined });
    t.teardown(() => client.end({ timeout: 0 }));
    const inFlight = rejection(client`SELECT pg_sleep(60)`);
    await waitFor(async () => (await admin`SELECT 1 FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'`).length === 1, 'the query to be running');
    await pg.stop();
    const cut = await inFlight;
    t.ok(['57P01', 'CONNECTION_CLOSED'].includes((cut as { code?: string }).code ?? ''), `a query cut by the shutdown: ${(cut as { code?: string }).code}`);
    t.same(mapped(cut), NOT_READY);
    const down = await rejection(ix.objects.hasAny());
    t.equal((down as { code?: string }).code, 'ECONNREFUSED', 'no server listening');
    t.same(mapped(down), NOT_READY);
    t.same(mapped(await rejection(ix.ping())), NOT_READY, 'ping (behind /ready) says so too');
    await pg.restart();
    await ix.ping();
    t.equal(await ix.objects.hasAny(), false, 'the same index works again without a restart');
  });
}

t.test('file system faults keep their mapping', async (t) => {
  t.same(mapped(Object.assign(new Error('x'), { code: 'ENOSPC' })), { status: 507, code: 'LFS_ERR_STORAGE_FULL', retryAfter: undefined });
  t.same(mapped(Object.assign(new Error('x'), { code: 'EIO' })), NOT_READY);
  t.equal(mapped(Object.assign(new Error('x'), { code: 'ENOENT' })), null);
});

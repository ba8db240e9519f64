import Database from 'better-sqlite3';
import { join } from 'node:path';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { PostgresIndex } from '../../src/db/postgres/postgres-index.js';
import { PG_MIGRATIONS } from '../../src/db/postgres/migrations/index.js';
import { MIGRATIONS } from '../../src/db/sqlite/migrations/index.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import type { Oid } from '../../src/protocol/oid.js';
import { parseRepoName } from '../../src/protocol/repo-name.js';
import { indexReferenceLog } from '../../src/service/index-reference-log.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, LFS, push } from '../helpers/lfs-http.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';

/**
 * One repository has one name whatever its case (the forges compare names case-insensitively):
 * objects, locks, the quota and the forge's answers are shared by every spelling, a trailing `.git`
 * is the same repository, and other encodings of a name are refused. Existing indexes (SQLite and
 * PostgreSQL) built with case variants as separate keys are merged when migrated.
 */

// Started before the first subtest (see startPostgres).
const pg = hasPostgres() ? await startPostgres((fn) => t.teardown(fn)) : null;

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());

/** Every spelling the tests use: the emulator matches names exactly, GitHub does not, so each is registered. */
function spellings(org: string, repo: string): string[] {
  const up = (s: string): string => s.toUpperCase();
  const cap = (s: string): string => s[0]!.toUpperCase() + s.slice(1);
  return [`${org}/${repo}`, `${up(org)}/${repo}`, `${cap(org)}/${up(repo)}`, `${cap(org)}/${cap(repo)}`, `${org}/${up(repo)}`, `${up(org)}/${up(repo)}`];
}
const REPOS = ['ci', 'locks', 'refs', 'enc'].flatMap((r) => spellings('acme', r));
for (const r of REPOS) forge.repos.set(r, { private: true });
forge.tokens.set('root', { login: 'root', siteAdmin: true, repos: {} });
forge.tokens.set('alice', { login: 'alice', repos: Object.fromEntries(REPOS.map((r) => [r, 'push'])) });
forge.tokens.set('bob', { login: 'bob', repos: Object.fromEntries(REPOS.map((r) => [r, 'push'])) });

const ADMIN = { authorization: 'Bearer root', 'content-type': 'application/json' };

async function lockApi(s: RunningServer, path: string, token: string, body?: unknown): Promise<ReturnType<typeof http>> {
  const headers: Record<string, string> = { accept: LFS, authorization: basic(token) };
  if (body !== undefined) headers['content-type'] = LFS;
  return http(body === undefined ? 'GET' : 'POST', `${s.url}${path}`, { headers, body: body === undefined ? undefined : JSON.stringify(body) });
}

async function serverChecks(t: Test, env: Record<string, string>): Promise<void> {
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, ...env });
  t.teardown(() => server.stop());
  const base = server.url;

  await t.test('the quota counts every spelling of a repository once', async (t) => {
    t.equal((await http('PUT', `${base}/-/api/access`, { headers: ADMIN, body: JSON.stringify({ repo_quota: 60 }) })).status, 200);
    t.teardown(() => http('PUT', `${base}/-/api/access`, { headers: ADMIN, body: JSON.stringify({ repo_quota: 0 }) }));
    t.equal(await push(base, 'acme/ci', 'alice', blob(50)), 200, 'the first 50 bytes fit');
    const second = blob(50);
    for (const spelling of ['acme/ci', 'ACME/ci', 'Acme/CI']) {
      const res = await batch(base, spelling, 'alice', 'upload', [{ oid: second.oid, size: second.size }]);
      t.equal(res.status, 200);
      t.equal(res.json().objects[0].error?.code, 507, `${spelling}: the second 50 bytes are past the quota`);
      const put = await http('PUT', `${base}/${spelling}/objects/${second.oid}`, { headers: { authorization: basic('alice') }, body: second.data });
      t.equal(put.status, 507, `${spelling}: so is its PUT`);
    }
  });

  await t.test('a lock taken through one spelling holds through every other', async (t) => {
    const made = await lockApi(server, '/ACME/locks/locks', 'alice', { path: 'art/hero.psd' });
    t.equal(made.status, 201);
    const id = made.json().lock.id as string;
    const listed = await lockApi(server, '/acme/locks/locks?path=art/hero.psd', 'bob');
    t.equal(listed.status, 200);
    t.same(listed.json().locks.map((l: { id: string }) => l.id), [id], 'listed through acme/locks');
    const clash = await lockApi(server, '/acme/LOCKS/locks', 'bob', { path: 'art/hero.psd' });
    t.equal(clash.status, 409, 'bob cannot take it through another spelling');
    t.equal(clash.json().lock.id, id);
    const verify = await lockApi(server, '/Acme/Locks/locks/verify', 'bob', {});
    t.same(verify.json().theirs.map((l: { id: string }) => l.id), [id], 'verify shows it as theirs');
    const byGit = await lockApi(server, '/acme/locks.git/locks', 'bob', { path: 'art/hero.psd' });
    t.equal(byGit.status, 409, 'a trailing .git is the same repository');
    const unlocked = await lockApi(server, `/acme/locks/locks/${id}/unlock`, 'alice', {});
    t.equal(unlocked.status, 200, 'released through a third spelling');
  });

  await t.test('an object uploaded through one spelling is held by every other', async (t) => {
    const b = blob(1234);
    t.equal(await push(base, 'Acme/Refs', 'alice', b), 200);
    t.ok(forge.lookups.some((l) => l.repo === 'Acme/Refs'), 'the forge is asked the name as given');
    for (const spelling of ['acme/refs', 'ACME/REFS', 'acme/refs.git']) {
      const dl = await batch(base, spelling, 'bob', 'download', [{ oid: b.oid, size: b.size }]);
      t.equal(dl.status, 200);
      const href = dl.json().objects[0].actions?.download?.href as string | undefined;
      t.ok(href, `${spelling}: a download link`);
      if (href === undefined) continue;
      const got = await http('GET', href, { headers: { authorization: basic('bob') } });
      t.equal(got.status, 200, `${spelling}: downloaded`);
      t.ok(got.body.equals(b.data), `${spelling}: the same bytes`);
      const up = await batch(base, spelling, 'bob', 'upload', [{ oid: b.oid, size: b.size }]);
      t.notOk(up.json().objects[0].actions, `${spelling}: the upload is skipped, the repository holds it`);
    }
    const stats = await http('GET', `${base}/ACME/refs/objects/stats`, { headers: { authorization: basic('bob') } });
    t.equal(stats.status, 200);
    t.match(stats.json(), { repository: 'acme/refs', objects: 1, logical_bytes: 1234 }, 'one repository, one object');
  });

  // uWS hands route parameters over undecoded, so an escape never reaches a key: it is refused
  // as a name (404, as any malformed path), like a look-alike letter outside ASCII.
  await t.test('other encodings of a name are refused, never a namespace of their own', async (t) => {
    const b = blob(10);
    t.equal(await push(base, 'acme/enc', 'alice', b), 200);
    for (const path of ['acme/%65nc', 'acme/%45NC', '%61cme/enc', 'acme/%D0%B5nc', 'acme/e%CC%81nc', 'acme/enc%2Egit']) {
      const res = await batch(base, path, 'alice', 'upload', [{ oid: b.oid, size: b.size }]);
      t.equal(res.status, 404, `${path}: refused`);
      t.match(String(res.headers['content-type']), /^application\/vnd\.git-lfs\+json/, `${path}: an LFS error body`);
      t.match(res.json().message, /Not a valid repository name/);
    }
  });
}

t.test('sqlite: one repository per name, whatever its case', (t) => serverChecks(t, {}));

t.test('postgres: one repository per name, whatever its case', async (t) => {
  if (pg === null) {
    t.fail(POSTGRES_INSTALL_HINT);
    return;
  }
  await serverChecks(t, { SVC_DATABASE_URL: await pg.createDatabase() });
});

// --- Migration of an index written when case variants were separate keys ---

const OID = (c: string): Oid => c.repeat(64) as Oid;
const A = OID('a');
const B = OID('b');
const C = OID('c');

/** Rows as the old code could leave them: three spellings of acme/ci (one with .git), and another repository. */
const OLD_ROWS: [string, (string | number | null)[]][] = [
  ['INSERT INTO objects (oid, size, stored_size, created_at) VALUES ($1, $2, $3, $4)', [A, 10, 10, 1]],
  ['INSERT INTO objects (oid, size, stored_size, created_at) VALUES ($1, $2, $3, $4)', [B, 20, 20, 1]],
  ['INSERT INTO objects (oid, size, stored_size, created_at) VALUES ($1, $2, $3, $4)', [C, 30, 30, 1]],
  ['INSERT INTO repo_objects (repo, oid, created_at) VALUES ($1, $2, $3)', ['Acme/CI', A, 100]],
  ['INSERT INTO repo_objects (repo, oid, created_at) VALUES ($1, $2, $3)', ['acme/ci', A, 50]],
  ['INSERT INTO repo_objects (repo, oid, created_at) VALUES ($1, $2, $3)', ['ACME/CI', B, 200]],
  ['INSERT INTO repo_objects (repo, oid, created_at) VALUES ($1, $2, $3)', ['acme/CI.git', C, 300]],
  ['INSERT INTO repo_objects (repo, oid, created_at) VALUES ($1, $2, $3)', ['Other/X', A, 10]],
  // Two spellings hold x.psd: the older (L2) stays. L3 is alone on y.psd.
  ['INSERT INTO locks (id, repo, path, ref, owner_id, owner_name, locked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)', ['L1', 'acme/ci', 'x.psd', null, '1', 'alice', 2000]],
  ['INSERT INTO locks (id, repo, path, ref, owner_id, owner_name, locked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)', ['L2', 'Acme/CI', 'x.psd', null, '2', 'bob', 1000]],
  ['INSERT INTO locks (id, repo, path, ref, owner_id, owner_name, locked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)', ['L3', 'ACME/ci', 'y.psd', null, '1', 'alice', 3000]],
  ['INSERT INTO locks (id, repo, path, ref, owner_id, owner_name, locked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)', ['L4', 'acme/ci', 'Y.psd', null, '1', 'alice', 3000]],
  ['INSERT INTO repo_audits (repo, finished_at, objects, bytes, corrupt, unreadable, complete) VALUES ($1, $2, $3, $4, $5, $6, $7)', ['Acme/CI', 100, 1, 10, 0, 0, 1]],
  ['INSERT INTO repo_audits (repo, finished_at, objects, bytes, corrupt, unreadable, complete) VALUES ($1, $2, $3, $4, $5, $6, $7)', ['acme/ci', 200, 2, 30, 0, 0, 1]],
  ['INSERT INTO jobs (id, kind, repo, state, dry_run, objects_done, bytes_done, started_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)', ['J1', 'audit', 'Acme/CI', 'done', 0, 1, 10, 5]],
  ['INSERT INTO job_leases (repo, node, at) VALUES ($1, $2, $3)', ['Acme/CI', 'n1', 5]],
  ['INSERT INTO job_leases (repo, node, at) VALUES ($1, $2, $3)', ['acme/ci', 'n2', 10]],
  ['INSERT INTO quarantine (oid, repo, reason, at) VALUES ($1, $2, $3, $4)', [B, 'ACME/CI', 'corrupt: test', 7]],
];

interface Migrated {
  refs: { repo: string; oid: string; created_at: number }[];
  locks: { id: string; repo: string; path: string }[];
  audits: { repo: string; finished_at: number }[];
  jobs: { repo: string }[];
  leases: { repo: string; node: string }[];
  quarantine: { repo: string }[];
}

function checkMigrated(t: Test, m: Migrated, logs: [string, Record<string, unknown>][]): void {
  t.same(m.refs, [
    { repo: 'acme/ci', oid: A, created_at: 50 },
    { repo: 'acme/ci', oid: B, created_at: 200 },
    { repo: 'acme/ci', oid: C, created_at: 300 },
    { repo: 'other/x', oid: A, created_at: 10 },
  ], 'references unioned under the canonical name, the earliest date kept');
  t.same(m.locks, [
    { id: 'L2', repo: 'acme/ci', path: 'x.psd' },
    { id: 'L3', repo: 'acme/ci', path: 'y.psd' },
    { id: 'L4', repo: 'acme/ci', path: 'Y.psd' },
  ], 'of two locks on one path the older stays; paths keep their case');
  t.same(m.audits, [{ repo: 'acme/ci', finished_at: 200 }], 'the latest audit kept');
  t.same(m.jobs, [{ repo: 'acme/ci' }]);
  t.same(m.leases, [{ repo: 'acme/ci', node: 'n1' }], 'one lease, the oldest');
  t.same(m.quarantine, [{ repo: 'acme/ci' }]);
  const dropped = logs.filter(([msg]) => msg === 'index migration dropped a lock');
  t.match(dropped, [['index migration dropped a lock', { id: 'L1', repo: 'acme/ci', path: 'x.psd', owner: 'alice', kept: 'L2' }]], 'the dropped lock is reported');
  t.equal(dropped.length, 1);
}

const SELECTS = {
  refs: 'SELECT repo, oid, created_at FROM repo_objects ORDER BY repo, oid',
  locks: 'SELECT id, repo, path FROM locks ORDER BY id',
  audits: 'SELECT repo, finished_at FROM repo_audits ORDER BY repo',
  jobs: 'SELECT repo FROM jobs',
  leases: 'SELECT repo, node FROM job_leases',
  quarantine: 'SELECT repo FROM quarantine',
} as const;

t.test('sqlite migration: case variants merged into one repository', async (t) => {
  const file = join(tmpDir(), 'index.sqlite');
  const old = new Database(file);
  const upTo = MIGRATIONS.findIndex((m) => m.name === '006-sweeps');
  for (let v = 0; v <= upTo; v++) {
    old.exec(MIGRATIONS[v]!.sql);
    old.pragma(`user_version = ${v + 1}`);
  }
  for (const [sql, args] of OLD_ROWS) old.prepare(sql.replace(/\$\d+/g, '?')).run(...args);
  old.close();

  const logs: [string, Record<string, unknown>][] = [];
  const ix = openSqliteIndex(file, (msg, fields) => logs.push([msg, fields as Record<string, unknown>]));
  t.teardown(() => ix.close());
  const db = new Database(file, { readonly: true });
  t.teardown(() => db.close());
  const all = (sql: string): any[] => db.prepare(sql).all();
  checkMigrated(t, { refs: all(SELECTS.refs), locks: all(SELECTS.locks), audits: all(SELECTS.audits), jobs: all(SELECTS.jobs), leases: all(SELECTS.leases), quarantine: all(SELECTS.quarantine) }, logs);
  t.ok(await ix.objects.findInRepo(parseRepoName('ACME', 'ci.git')!.key, C), 'found through the parsed name of any spelling');

  // A journal written before the upgrade replays its references under the canonical name.
  const D = OID('d');
  await indexReferenceLog(ix).restore('Acme/Journal', D, 5);
  t.ok(await ix.objects.findInRepo('acme/journal', D), 'a replayed reference is keyed by the canonical name');
});

t.test('postgres migration: case variants merged into one repository', async (t) => {
  if (pg === null) {
    t.fail(POSTGRES_INSTALL_HINT);
    return;
  }
  const url = await pg.createDatabase();
  const admin = postgres(url, { max: 1, onnotice: () => undefined, types: { bigint: postgres.BigInt } });
  t.teardown(() => admin.end());
  const upTo = PG_MIGRATIONS.findIndex((m) => m.name === '002-sweeps');
  await admin.begin(async (tx) => {
    await tx`CREATE TABLE schema_version (version INTEGER NOT NULL)`;
    for (let v = 0; v <= upTo; v++) await tx.unsafe(PG_MIGRATIONS[v]!.sql).simple();
    await tx`INSERT INTO schema_version (version) VALUES (${upTo + 1})`;
    for (const [sql, args] of OLD_ROWS) await tx.unsafe(sql, args as never[]);
  });

  const logs: [string, Record<string, unknown>][] = [];
  const ix = await PostgresIndex.open(url, (msg, fields) => logs.push([msg, fields as Record<string, unknown>]));
  t.teardown(() => ix.close());
  const all = async (sql: string): Promise<any[]> => (await admin.unsafe(sql)).map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, typeof v === 'bigint' ? Number(v) : v])));
  checkMigrated(t, { refs: await all(SELECTS.refs), locks: await all(SELECTS.locks), audits: await all(SELECTS.audits), jobs: await all(SELECTS.jobs), leases: await all(SELECTS.leases), quarantine: await all(SELECTS.quarantine) }, logs);
  t.ok(await ix.objects.findInRepo(parseRepoName('ACME', 'ci.git')!.key, C), 'found through the parsed name of any spelling');
});

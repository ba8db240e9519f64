import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { COPIED_TABLES, tableDigest } from '../../src/db/index-tables.js';
import { PostgresTables } from '../../src/db/postgres/postgres-tables.js';
import { SqliteTables } from '../../src/db/sqlite/sqlite-tables.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { GitSandbox } from '../helpers/git.js';
import { freePort } from '../helpers/nginx.js';
import { startPostgres } from '../helpers/postgres.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir } from '../helpers/start-server.js';
import { capped } from '../helpers/wait-for.js';

// A single node (SQLite + disk) filled by the real git-lfs client, stopped, moved with
// `stowage migrate --objects` to a throwaway PostgreSQL and the S3-protocol test server (once
// killed in the middle, then run again), and served from there by a node on PostgreSQL + S3.
const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const REPO = 'studio/game';
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const basic = (token: string): string => `Basic ${Buffer.from(`git:${token}`).toString('base64')}`;

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set(REPO, { private: true });
forge.tokens.set('tok-dev', { login: 'dev', repos: { [REPO]: 'push' } });
forge.tokens.set('root', { login: 'root', siteAdmin: true, repos: {} });

const root = tmpDir('stowage-e2e-migrate-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const pg = await startPostgres((fn) => t.teardown(fn));
const s3 = await startS3Server(join(root, 's3'));
t.teardown(() => s3.stop());
// The port both servers use in turn, so the clone's lfs.url and stored credential stay valid.
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const serverEnv = { SVC_PORT: String(port), SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd' };

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** `stowage migrate …` as a process: its end, and its first line of progress (an event). */
function migrate(args: string[], env: Record<string, string>): { done: Promise<Run>; firstLine: Promise<void>; kill: () => void } {
  const child = spawn(process.execPath, [CLI, 'migrate', ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { stdout: '', stderr: '' };
  let line: () => void = () => {};
  const firstLine = new Promise<void>((r) => (line = r));
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out.stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    out.stderr += c;
    if (out.stderr.includes('\n')) line();
  });
  const done = capped(new Promise<Run>((res) => child.on('close', (code, signal) => res({ code, signal, ...out }))), 'stowage migrate to exit');
  return { done, firstLine, kill: () => child.kill('SIGKILL') };
}

// 1. The single node, filled by git-lfs: objects of several sizes (small ones go through the
// journal; the text one is stored compressed), one lock, a saved setting, a session, a finished job.
const dataDir = join(root, 'data');
const old = await startServer(serverEnv, { dataDir });
const sb = await GitSandbox.create(join(root, 'home'), base, 'tok-dev');
const { remote, work } = await sb.newProject(join(root, 'project'), `${base}/${REPO}`);
const files: Record<string, string> = {};
let cookie = '';
let jobId = '';

t.test('a single node filled by git-lfs and the dashboard', async (t) => {
  for (const [name, data] of [
    ['tiny.bin', randomBytes(1)],
    ['small.bin', randomBytes(100_000)],
    ['notes.txt', Buffer.from('a line of text that compresses well\n'.repeat(20_000))],
    ['big.bin', randomBytes(3_000_000)],
  ] as const) {
    writeFileSync(join(work, name), data);
    files[name] = sha(data);
  }
  await sb.git(work, 'add', '.');
  await sb.git(work, 'commit', '-qm', 'assets');
  await sb.git(work, 'push', '-q', 'origin', 'main');
  await sb.git(work, 'lfs', 'lock', 'big.bin');
  const signIn = await fetch(`${base}/-/api/session`, { method: 'POST', headers: { 'content-type': 'application/json', origin: base }, body: JSON.stringify({ token: 'root' }) });
  t.equal(signIn.status, 201, 'a forge admin signs in to the dashboard');
  cookie = signIn.headers.get('set-cookie')!.split(';')[0]!;
  const saved = await fetch(`${base}/-/api/access`, { method: 'PUT', headers: { cookie, origin: base, 'content-type': 'application/json' }, body: JSON.stringify({ max_object_size: '8MiB' }) });
  t.equal(saved.status, 200, 'an access setting is saved');
  const audit = await fetch(`${base}/${REPO}/objects/audit`, { method: 'POST', headers: { authorization: basic('tok-dev'), 'content-type': 'application/json' }, body: '{}' });
  const job = (await audit.json()) as { job: string; state: string };
  t.equal(job.state, 'done', 'an audit job ran to the end');
  jobId = job.job;
});

const target = (await pg.createDatabase()).replace('postgres@', 'postgres:sekret-pw@');
const migrateEnv = { SVC_DATA_DIR: dataDir, SVC_COMPRESSION: 'zstd', ...s3.env() };

t.test('refused while the server runs', async (t) => {
  const r = await migrate(['--to', target, '--objects'], migrateEnv).done;
  t.equal(r.code, 2, 'exit 2');
  t.match(r.stderr, /in use by another Stowage process \(pid \d+\).*stop the server first/);
});

t.test('usage errors', async (t) => {
  const noTarget = await migrate([], migrateEnv).done;
  t.equal(noTarget.code, 2);
  t.match(noTarget.stderr, /give --to postgres:\/\//);
  const noBucket = await migrate(['--to', target, '--objects'], { SVC_DATA_DIR: dataDir }).done;
  t.equal(noBucket.code, 2, '--objects without a bucket configured');
  t.match(noBucket.stderr, /SVC_STORE=s3/);
  const noHost = await migrate(['--to', 'postgres://u:hidden-pw@/db'], migrateEnv).done;
  t.equal(noHost.code, 2, 'a --to without a host');
  t.match(noHost.stderr, /--to must be a postgres:\/\/ or postgresql:\/\/ URL with a host, got "postgres:\/\/u:\*\*\*@\/db"/);
  const help = await migrate(['--help'], {}).done;
  t.equal(help.code, 0);
  t.match(help.stdout, /usage: stowage migrate --to/);
  t.match(help.stdout, /not through a server: stop the server/);
});

t.test('moved to PostgreSQL + S3: interrupted, run again, verified, served', async (t) => {
  t.equal(await old.stop(), 0, 'the single node stops cleanly');

  const dry = await migrate(['--to', target, '--objects', '--dry-run', '--json'], migrateEnv).done;
  t.equal(dry.code, 0, 'a dry run exits 0');
  const planned = JSON.parse(dry.stdout) as { dry_run: boolean; tables: { table: string; source_rows: number; target_rows: number }[]; objects: { total: number } };
  t.equal(planned.dry_run, true);
  t.equal(planned.objects.total, 4, 'four objects to copy');
  t.ok(planned.tables.every((x) => x.target_rows === 0), 'and nothing written to the target');

  // Killed after its first progress line: whatever it had done stays, the rerun adds the rest.
  const first = migrate(['--to', target, '--objects'], migrateEnv);
  await first.firstLine;
  first.kill();
  const killed = await first.done;
  t.equal(killed.signal, 'SIGKILL', 'the first run was killed');

  const second = await migrate(['--to', target, '--objects', '--json'], migrateEnv).done;
  t.equal(second.code, 0, `the second run verifies (${second.stderr})`);
  const report = JSON.parse(second.stdout) as {
    verified: boolean;
    problems: string[];
    target: string;
    tables: { table: string; source_rows: number; target_rows: number; verified: boolean }[];
    objects: { total: number; copied: number; already_in_bucket: number; absent_from_bucket: string[] };
  };
  t.same(report.problems, []);
  t.equal(report.verified, true);
  t.notMatch(second.stdout + second.stderr + killed.stderr, /sekret-pw/, 'the password is never printed');
  t.match(report.target, /postgres:\*\*\*@127\.0\.0\.1/);
  const rows = Object.fromEntries(report.tables.map((x) => [x.table, x]));
  t.equal(rows.objects!.target_rows, 4);
  t.equal(rows.repo_objects!.target_rows, 4);
  t.equal(rows.locks!.target_rows, 1, 'the lock');
  t.equal(rows.sessions!.target_rows, 1, 'the session');
  t.equal(rows.settings!.target_rows, 1, 'the setting');
  t.ok(rows.jobs!.target_rows >= 1, 'the job history');
  t.ok(report.tables.every((x) => x.verified), 'every table verified');
  t.equal(report.objects.total, 4);
  t.equal(report.objects.copied + report.objects.already_in_bucket, 4, 'every object copied or found');

  // Digests computed independently here agree (the command's verification is not taken on trust).
  const src = SqliteTables.open(join(dataDir, 'index.sqlite'), 'readonly');
  const dst = await PostgresTables.open(target, false);
  for (const spec of COPIED_TABLES) t.same(await tableDigest(dst, spec), await tableDigest(src, spec), `${spec.name} digests equal`);
  t.ok((await dst.sequenceHighWater('locks')) >= (await src.sequenceHighWater('locks')), 'the lock identity continues after the copied seq');
  // The bucket's stored size is recorded: the compressed text takes less than its size.
  const objects = await dst.read('objects', null, 10);
  const notes = objects.find((r) => r.oid === files['notes.txt'])!;
  t.ok((notes.stored_size as number) < (notes.size as number), 'notes.txt is stored compressed in the bucket');
  await src.close();
  await dst.close();

  const third = await migrate(['--to', target, '--objects', '--json'], migrateEnv).done;
  t.equal(third.code, 0, 'a third run verifies too');
  const again = JSON.parse(third.stdout) as typeof report;
  t.ok(again.tables.every((x) => (x as unknown as { copied: number }).copied === 0), 'and adds no row');
  t.equal(again.objects.copied, 0, 'and copies no object');

  const human = await migrate(['--to', target, '--objects'], migrateEnv).done;
  t.equal(human.code, 0);
  t.match(human.stdout, /^index\.sqlite → postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/\w+\n/, 'the summary names the target, password hidden');
  t.match(human.stdout, /^table +rows +copied +in target +verified\n/m);
  t.match(human.stdout, /^locks +1 +0 +1 +ok$/m);
  t.match(human.stdout, /objects: 4 in the index; 0 copied \(0 B\), 4 already in the bucket/);
  t.match(human.stdout, /ok verified: start the nodes with SVC_DATABASE_URL and SVC_STORE=s3\n$/);

  // 2. A node on PostgreSQL + S3 serves what the single node held.
  const node = await startServer({ ...serverEnv, ...s3.env(), SVC_DATABASE_URL: target });
  t.teardown(() => node.stop());
  const clone = join(root, 'clone');
  await sb.git(root, 'clone', '-q', remote, clone);
  for (const [name, oid] of Object.entries(files)) t.equal(sha(readFileSync(join(clone, name))), oid, `${name} cloned intact`);
  const locks = await sb.git(clone, 'lfs', 'locks');
  t.match(locks.stdout, /big\.bin\s+dev/, 'the lock is listed');
  const session = await fetch(`${base}/-/api/session`, { headers: { cookie } });
  t.equal(session.status, 200, 'the dashboard session still signs in');
  const access = (await (await fetch(`${base}/-/api/access`, { headers: { cookie } })).json()) as { max_object_size: unknown };
  t.match(JSON.stringify(access), /8388608|8 ?MiB/, 'the saved setting is there');
  const tooBig = await fetch(`${base}/${REPO}/info/lfs/objects/batch`, {
    method: 'POST',
    headers: { authorization: basic('tok-dev'), 'content-type': 'application/vnd.git-lfs+json', accept: 'application/vnd.git-lfs+json' },
    body: JSON.stringify({ operation: 'upload', transfers: ['basic'], objects: [{ oid: 'a'.repeat(64), size: 9 << 20 }] }),
  });
  const answer = (await tooBig.json()) as { objects?: { error?: { code: number } }[] };
  t.ok(tooBig.status >= 400 || answer.objects?.[0]?.error !== undefined, 'and applied: an object over 8 MiB is refused');
  const jobs = (await (await fetch(`${base}/${REPO}/objects/jobs`, { headers: { authorization: basic('tok-dev') } })).json()) as { jobs: { id: string; state: string }[] };
  t.ok(jobs.jobs.some((j) => j.id === jobId && j.state === 'done'), 'the finished job is in the history');
});

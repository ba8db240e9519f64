import { spawn, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { constants, closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, rmSync, writeFileSync, writeSync, chmodSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { sandboxEnv } from '../helpers/git.js';
import { basic, http } from '../helpers/lfs-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// The operator CLI as a user and a script meet it: the real `stowage` against a real server.
// Options are strict (an unknown one is refused with exit 2), every command has --help, `serve
// --help` never starts a server, --json parses, progress without a terminal is plain lines, jobs
// are listed, followed and cancelled, Ctrl-C leaves a job running, credentials come from git's
// credential helper, and an audit is read-only unless --quarantine.

const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
for (const r of ['acme/game', 'acme/slow']) forge.repos.set(r, { private: true });
// A forge site admin: import is a server administrator's act.
forge.tokens.set('tok-admin', { login: 'boss', siteAdmin: true, repos: { 'acme/game': 'admin', 'acme/slow': 'admin' } });
forge.tokens.set('tok-pull', { login: 'viewer', repos: { 'acme/game': 'pull', 'acme/slow': 'pull' } });

// The folder `import` may read other servers' content folders from.
const importRoot = tmpDir('stowage-e2e-cli-import-');
t.teardown(() => rmSync(importRoot, { recursive: true, force: true }));
// One maintenance thread: a job works on one object at a time, in oid order.
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_WORKERS: '1', SVC_IMPORT_DIR: importRoot });
t.teardown(() => server.stop());
const root = tmpDir('stowage-e2e-cli-');
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const home = join(root, 'home');
mkdirSync(home);
const baseEnv = { ...sandboxEnv(home), STOWAGE_URL: server.url };
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const pathOf = (oid: string): string => join(server.dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A running CLI: its output so far, a wait for a line of stderr (an event, not a clock), and its end. */
function start(args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const child = spawn(process.execPath, [CLI, ...args], { cwd: opts.cwd ?? root, env: opts.env ?? { ...baseEnv, STOWAGE_TOKEN: 'tok-admin' }, stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { stdout: '', stderr: '' };
  const waiters: { re: RegExp; resolve: (m: RegExpMatchArray) => void }[] = [];
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out.stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    out.stderr += c;
    for (const w of [...waiters]) {
      const m = w.re.exec(out.stderr);
      if (m) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  });
  const done = new Promise<Run>((res) => child.on('close', (code, signal) => res({ code, signal, ...out })));
  const stderrLine = (re: RegExp): Promise<RegExpMatchArray> => {
    const m = re.exec(out.stderr);
    return m ? Promise.resolve(m) : Promise.race([new Promise<RegExpMatchArray>((resolve) => waiters.push({ re, resolve })), done.then((r) => Promise.reject(new Error(`exited ${r.code} before ${re}: ${r.stderr}`)))]);
  };
  return { child, done, stderrLine };
}
const cli = (args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Run> => start(args, opts).done;

async function put(repo: string, data: Buffer): Promise<string> {
  const res = await http('PUT', `${server.url}/${repo}/objects/${sha(data)}`, { headers: { authorization: basic('tok-admin') }, body: data });
  if (res.status !== 200) throw new Error(`PUT ${res.status} ${res.body}`);
  return sha(data);
}

// Larger than the store's small-object journal, so each has a file of its own.
const objects = [randomBytes((1 << 20) + 100), randomBytes((1 << 20) + 200), randomBytes((2 << 20) + 7)];
for (const o of objects) await put('acme/game', o);

t.test('help, version, and strict options', async (t) => {
  const general = await cli(['--help']);
  t.equal(general.code, 0);
  t.match(general.stdout, /usage: stowage <command>/);
  t.equal((await cli(['-h'])).code, 0, '-h is help too');
  const v = await cli(['--version']);
  t.equal(v.code, 0);
  t.equal(v.stdout.trim(), `stowage ${JSON.parse(readFileSync(resolve(dirname(CLI), '../../package.json'), 'utf8')).version}`);
  const asked = [...['serve', 'audit', 'dedupe', 'compress', 'retain', 'stats', 'jobs'].map((cmd) => [cmd, '--help']), ['audit', '-h'], ['jobs', 'follow', '-h']];
  for (const args of asked) {
    const h = await cli(args);
    t.equal(h.code, 0, `${args.join(' ')} exits 0`);
    t.match(h.stdout, new RegExp(`^usage: stowage ${args[0]}`), `${args.join(' ')} prints the command's own usage`);
  }
  const unknown = await cli(['compress', 'acme/game', '--dryrun']);
  t.equal(unknown.code, 2, 'an unknown flag is refused with exit 2');
  t.equal(unknown.stderr.trim().split('\n').length, 1, 'with a one-line reason');
  t.match(unknown.stderr, /unknown option --dryrun/);
  t.equal((await cli(['frobnicate'])).code, 2, 'an unknown command is exit 2');
  t.equal((await cli(['stats', 'not-a-repo-name/'])).code, 2, 'a bad repository name is exit 2');
});

t.test('serve --help prints help and never starts a server', async (t) => {
  const data = join(root, 'serve-data');
  const r = await cli(['serve', '--help'], { env: { ...baseEnv, SVC_DATA_DIR: data, SVC_PORT: '0', SVC_HOST: '127.0.0.1' } });
  t.equal(r.code, 0);
  t.match(r.stdout, /^usage: stowage serve/);
  t.notOk(existsSync(data), 'no data directory was created: the server never started');
  t.notMatch(r.stdout + r.stderr, /listening/);
});

t.test('audit: --json parses, progress lines without a terminal, read-only unless --quarantine', async (t) => {
  const clean = await cli(['audit', 'acme/game', '--json']);
  t.equal(clean.code, 0, clean.stderr);
  const report = JSON.parse(clean.stdout);
  t.match(report, { objects: 3, ok: 3, corrupt: 0, state: 'done', outcome: 'clean' });
  const id = /audit job (\S+) started on acme\/game/.exec(clean.stderr)?.[1];
  t.ok(id, 'the job id is printed at start');
  t.equal(report.job, id);
  const total = objects.reduce((n, o) => n + o.length, 0);
  const lines = clean.stderr.trim().split('\n').slice(1);
  t.ok(lines.length >= 1, 'plain progress lines, no bar');
  t.notMatch(clean.stderr, /\r|\x1b\[/, 'no carriage returns or escapes without a terminal');
  t.match(lines.at(-1), new RegExp(`^audit acme/game: done, 100%, ${(total / (1 << 20)).toFixed(2)} MiB / ${(total / (1 << 20)).toFixed(2)} MiB, .*elapsed, 3/3 objects$`));

  // One flipped byte: found (exit 1), but nothing quarantined without --quarantine, even for an admin.
  const victim = pathOf(sha(objects[0]!));
  const fd = openSync(victim, 'r+');
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, 1000);
  writeSync(fd, Buffer.from([b[0]! ^ 1]), 0, 1, 1000);
  closeSync(fd);
  const found = await cli(['audit', 'acme/game']);
  t.equal(found.code, 1, 'problems found: exit 1');
  t.match(found.stdout, /PROBLEMS acme\/game: 3 objects .* 1 corrupt, 0 unreadable; nothing quarantined/);
  t.match(found.stdout, new RegExp(`corrupt +${sha(objects[0]!)}`), 'the corrupt object is listed');
  t.ok(existsSync(victim), 'read-only: the file stays where it is');
  t.equal((await http('GET', `${server.url}/acme/game/objects/${sha(objects[0]!)}`, { headers: { authorization: basic('tok-admin') } })).status, 200, 'not quarantined');

  const pull = await cli(['audit', 'acme/game', '--quarantine'], { env: { ...baseEnv, STOWAGE_TOKEN: 'tok-pull' } });
  t.equal(pull.code, 2, '--quarantine without admin: refused by the server (403), exit 2');
  const q = await cli(['audit', 'acme/game', '--quarantine', '--json']);
  t.equal(q.code, 1);
  t.match(JSON.parse(q.stdout), { corrupt: 1, quarantined: 1, quarantine: 'applied', outcome: 'problems' });
  t.notOk(existsSync(victim), '--quarantine moved it aside');
  await put('acme/game', objects[0]!);
});

t.test('stats: a short human summary, --json for scripts; a refused token is exit 2', async (t) => {
  const s = await cli(['stats', 'acme/game']);
  t.equal(s.code, 0, s.stderr);
  t.throws(() => JSON.parse(s.stdout), 'not raw JSON');
  t.match(s.stdout, /^acme\/game\n {2}objects +3 +\(4\.00 MiB as uploaded/);
  t.ok(s.stdout.trim().split('\n').length <= 8, 'a few lines');
  t.match(s.stdout, /last audit .*(clean|corrupt)/);
  t.match(JSON.parse((await cli(['stats', 'acme/game', '--json'])).stdout), { repository: 'acme/game', objects: 3 });
  const bad = await cli(['stats', 'acme/game'], { env: { ...baseEnv, STOWAGE_TOKEN: 'tok-nobody' } });
  t.equal(bad.code, 2, '401 is exit 2, as documented');
  t.match(bad.stderr, /401/);
});

t.test("credentials from git's credential helper, inside a clone (stats and retain)", async (t) => {
  const clone = join(root, 'clone');
  mkdirSync(clone);
  const asked = join(root, 'helper-asked.log');
  const helper = join(root, 'helper.sh');
  writeFileSync(helper, `#!/bin/sh\n[ "$1" = get ] || exit 0\ncat >> '${asked}'\necho username=ci\necho password=tok-admin\n`);
  chmodSync(helper, 0o755);
  const env = sandboxEnv(home); // no STOWAGE_TOKEN, no STOWAGE_URL: the clone says where, its helper says who
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: clone, env, encoding: 'utf8' });
  git('init', '-q');
  git('config', 'lfs.url', `${server.url}/acme/game`);
  git('config', 'credential.helper', helper);
  writeFileSync(join(clone, 'readme.txt'), 'hello\n');
  git('add', '.');
  git('commit', '-qm', 'first');

  const s = await cli(['stats', '--json'], { cwd: clone, env });
  t.equal(s.code, 0, `the private repository was read with the helper's token (${s.stderr})`);
  t.match(JSON.parse(s.stdout), { repository: 'acme/game' });
  const port = new URL(server.url).port;
  t.match(readFileSync(asked, 'utf8'), new RegExp(`protocol=http\\nhost=127\\.0\\.0\\.1:${port}\\n`), 'asked for this server, as git-lfs asks');

  rmSync(asked);
  const r = await cli(['retain', '--dry-run', '--json'], { cwd: clone, env });
  t.equal(r.code, 0, `retain inside the clone uses the helper too (${r.stderr})`);
  t.match(JSON.parse(r.stdout), { dry_run: true, state: 'done' });
  t.ok(existsSync(asked), 'the helper was asked');
  const none = await cli(['stats', 'acme/game'], { cwd: root, env: sandboxEnv(home) });
  t.equal(none.code, 2, 'outside the clone, with no helper and no STOWAGE_URL: usage');
});

t.test('jobs: list, follow, Ctrl-C leaves the job running, cancel stops it between objects', async (t) => {
  const slow = [randomBytes((1 << 20) + 1), randomBytes((1 << 20) + 2), randomBytes((1 << 20) + 3)].map((d) => ({ d, oid: sha(d) }));
  for (const s of slow) await put('acme/slow', s.d);
  // The first object in oid order becomes a FIFO: the audit's worker blocks opening it until this
  // test opens the other end, so the job is deterministically running while it is cancelled.
  const first = slow.map((s) => s.oid).sort()[0]!;
  const fifo = pathOf(first);
  rmSync(fifo);
  execFileSync('mkfifo', [fifo]);
  let released = false;
  const release = async (): Promise<void> => {
    if (released) return;
    released = true;
    await (await open(fifo, 'w')).close(); // resolves once the worker has the other end open
  };
  t.teardown(() => {
    // If an assertion failed before release: unblock a worker waiting on the FIFO (no-op without one).
    if (!released) {
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // no reader: nothing is blocked
      }
    }
    rmSync(fifo, { force: true });
  });

  const audit = start(['audit', 'acme/slow']);
  const id = (await audit.stderrLine(/audit job (\S+) started on acme\/slow/))[1]!;

  const list = await cli(['jobs', 'acme/slow', '--json']);
  t.equal(list.code, 0, list.stderr);
  t.match(JSON.parse(list.stdout).jobs[0], { id, kind: 'audit', outcome: null, objects_total: 3 });
  const table = await cli(['jobs', 'acme/slow']);
  t.match(table.stdout, /^ID +KIND +STATE +OUTCOME/);
  t.match(table.stdout, new RegExp(`${id} +audit +(queued|running)`));

  audit.child.kill('SIGINT');
  const stopped = await audit.done;
  t.equal(stopped.code, 130, 'Ctrl-C: exit 130');
  t.match(stopped.stderr, `stowage jobs follow acme/slow ${id}`, 'says how to follow the job');
  const still = (await http('GET', `${server.url}/acme/slow/objects/jobs/${id}`, { headers: { authorization: basic('tok-admin') } })).json();
  t.equal(still.state, 'running', 'the job keeps running');

  const follower = start(['jobs', 'follow', 'acme/slow', id]);
  await follower.stderrLine(/audit acme\/slow: running/);
  const refused = await http('POST', `${server.url}/acme/slow/objects/jobs/${id}/cancel`, { headers: { authorization: basic('tok-pull'), 'content-type': 'application/json' } });
  t.equal(refused.status, 403, 'a reader may not cancel');
  const cancel = start(['jobs', 'cancel', id], { env: { ...baseEnv, STOWAGE_TOKEN: 'tok-admin' }, cwd: root });
  const cancelRun = await cancel.done;
  t.equal(cancelRun.code, 2, 'outside a clone, the id alone is not enough: usage');
  const canceller = start(['jobs', 'cancel', 'acme/slow', id]);
  await canceller.stderrLine(/cancelling audit job/); // the server has the request: now let the object in hand finish
  await release();
  const c = await canceller.done;
  t.equal(c.code, 0, c.stderr);
  t.match(c.stdout, `audit job ${id} cancelled after 1/3 objects`);
  const f = await follower.done;
  t.equal(f.code, 3, 'follow ends with the job: cancelled is exit 3 (not finished)');
  t.match(f.stderr, /audit acme\/slow: cancelled, /);
  const view = (await http('GET', `${server.url}/acme/slow/objects/jobs/${id}`, { headers: { authorization: basic('tok-admin') } })).json();
  t.match(view, { state: 'cancelled', outcome: 'cancelled', objects_done: 1, objects_total: 3 });
  t.match(JSON.parse((await cli(['jobs', 'acme/slow', '--json'])).stdout).jobs[0], { id, state: 'cancelled', outcome: 'cancelled' });
  const again = await cli(['jobs', 'cancel', 'acme/slow', id]);
  t.equal(again.code, 0, 'cancelling a finished job is a no-op');
  t.match(again.stdout, /already finished|cancelled/);
});

t.test("import: a Gitea content folder, with a corrupt file refused and listed (exit 1)", async (t) => {
  const good = randomBytes(300_000);
  const bad = randomBytes(200_000);
  const place = (oid: string, data: Buffer): void => {
    // Gitea's layout: ab/cd/<oid without its first four hex digits>.
    const dir = join(importRoot, 'gitea', oid.slice(0, 2), oid.slice(2, 4));
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, oid.slice(4)), data);
  };
  place(sha(good), good);
  const badOid = sha(bad);
  place(badOid, Buffer.concat([bad.subarray(1), Buffer.from([0])])); // named for bytes it does not hold

  const missing = await cli(['import', 'acme/game']);
  t.equal(missing.code, 2, 'no --layout: a usage error');
  t.match(missing.stderr, /--layout is required/);

  const r = await cli(['import', 'acme/game', '--layout', 'gitea', '--source', 'gitea']);
  t.equal(r.code, 1, 'a refused file makes the exit status 1');
  t.match(r.stdout, /1 imported/);
  t.match(r.stdout, new RegExp(`refused\\s+\\S*${badOid.slice(4, 16)}\\S*\\s+digest_mismatch`), 'the corrupt file is listed with its reason');
  const got = await http('GET', `${server.url}/acme/game/objects/${sha(good)}`, { headers: { authorization: basic('tok-admin') } });
  t.equal(got.status, 200, 'the imported object is served');
  t.equal(sha(got.body), sha(good), 'byte for byte');
  const refused = await http('GET', `${server.url}/acme/game/objects/${badOid}`, { headers: { authorization: basic('tok-admin') } });
  t.equal(refused.status, 404, 'the corrupt file was not taken');
});

/**
 * A/B of the small-object paths through the clients users have, builds taking turns round by round
 * (run it under the bench lock: `flock /work/bench.lock node native-bench/dist/small-ab.js …`).
 *
 *   node native-bench/dist/small-ab.js curl  [--n=1000] [--rounds=4] [--only=seq,par,get] [--no-retire] [--warm] NAME=DIST …
 *   node native-bench/dist/small-ab.js clone [--n=1000] [--rounds=3] [--log-requests] NAME=DIST …
 *
 * DIST is a build's dist directory (a copy of `dist/` placed where `node_modules` resolves, e.g.
 * beside a symlink to this checkout's). `curl`: per build and round a fresh server; N × 64 KiB PUT
 * through one curl process (seq), N more through 8 (par), then the first N fetched back by 8 curl
 * processes (get; after the journal retired, as a clone finds them, unless --no-retire). With --warm,
 * one server per build serves all its rounds, after a first round of each kind that is not counted:
 * what a server that has been up does (V8 has compiled the request path, the journal has retired
 * segments to recycle), as the bench's small-object rows measure it; each round waits for the
 * previous one's objects to retire, as in the bench. `clone`: one
 * server per build holding a pushed repository of N × 64 KiB LFS files, cloned in turn; the wall
 * time, the CPU of git and of git-lfs (a PATH shim times each git-lfs process with /usr/bin/time),
 * the server's CPU (all threads, and its event loop) and, with --log-requests, the requests' time
 * inside the server summed (÷ wall: how many of the client's requests the server holds on average).
 * Server CPU is utime + stime from /proc (10 ms ticks). Servers get the node options npm run
 * start:prod gives (src/config/node-flags.ts) unless `--plain-node`; `--node-args="…"` adds these
 * (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile the rounds), `--node-args-NAME="…"` adds
 * them to build NAME's servers only (the same dist under two names: an A/B of node options).
 * `--pin-NAME` runs build NAME's server on CPU 0 and its clones' git and git-lfs on CPU 1 (taskset):
 * the same server with a core of its own, so what sharing two cores with the client costs it shows.
 * `--v8-trace` starts the servers with V8's optimization, deoptimization and GC traces and
 * reports per round the young-generation collections (scavenges), the major collections (forced
 * ones apart), the functions marked for deoptimization and the TurboFan compiles with the
 * milliseconds they took (on V8's own threads, but the server's CPU all the same).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { cpuSecondsOf, mainThreadCpuSecondsOf } from './lib/proc-stats.js';
import { GitHubEmulator, GitSandbox, SERVER_NODE_FLAGS } from './lib/product.js';
import { median } from './lib/stats.js';

type Row = Record<string, number>;
interface Server {
  readonly child: ChildProcess;
  readonly port: number;
  readonly data: string;
  readonly lines: string[];
  /** --pin-NAME: the server on CPU 0, its clients on CPU 1. */
  readonly pinned: boolean;
}

const args = process.argv.slice(2);
const mode = args[0];
const opt = (name: string, fallback: string): string => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const N = Number(opt('n', '1000'));
const ROUNDS = Number(opt('rounds', mode === 'clone' ? '3' : '4'));
const builds = new Map(args.slice(1).filter((a) => !a.startsWith('--') && a.includes('=')).map((a) => a.split('=') as [string, string]));
if ((mode !== 'curl' && mode !== 'clone') || builds.size === 0) {
  process.stderr.write('usage: small-ab.js curl|clone [--n=N] [--rounds=R] [--only=seq,par,get] [--no-retire] [--log-requests] [--node-args="…"] NAME=DIST …\n');
  process.exit(2);
}
const scratch = mkdtempSync(join(tmpdir(), 'small-ab-'));
const forge = new GitHubEmulator();
await forge.start();
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok', { login: 'w', repos: { 'acme/game': 'push' } });
const load = (): number => loadavg()[0]!;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function start(name: string, dist: string): Promise<Server> {
  const data = mkdtempSync(join(scratch, 'data-'));
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, SVC_HOST: '127.0.0.1', SVC_PORT: '0', SVC_DATA_DIR: data, SVC_FORGE_A_API_URL: forge.url };
  if (args.includes('--log-requests')) env.SVC_LOG_REQUESTS = 'true';
  const nodeArgs = opt(`node-args-${name}`, opt('node-args', '')).split(' ').filter(Boolean);
  if (args.includes('--v8-trace')) nodeArgs.push('--trace-opt', '--trace-deopt', '--trace-gc');
  const flags = args.includes('--plain-node') ? [] : SERVER_NODE_FLAGS;
  const pinned = args.includes(`--pin-${name}`);
  const command = [process.execPath, ...flags, ...nodeArgs, join(dist, 'src/main.js')];
  // taskset execs node in its own process, so the pid is the server's.
  if (pinned) command.unshift('taskset', '-c', '0');
  const child = spawn(command[0]!, command.slice(1), { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines: string[] = [];
  let rest = '';
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`server ${dist} exited with ${code}`)));
    child.stdout!.on('data', (d: Buffer) => {
      const parts = (rest + d.toString()).split('\n');
      rest = parts.pop()!;
      for (const l of parts) {
        lines.push(l);
        const m = /"msg":"listening".*"port":(\d+)/.exec(l);
        if (m) resolve(Number(m[1]));
      }
    });
  });
  return { child, port, data, lines, pinned };
}

async function stop(s: Server): Promise<void> {
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  await exited;
}

const journalRetired = async (s: Server): Promise<void> => {
  while (readdirSync(join(s.data, 'journal')).some((f) => f.startsWith('seg-'))) await sleep(20);
};

/** N random 64 KiB files named by their oid. */
function objects(n: number): { dir: string; oids: string[] } {
  const dir = mkdtempSync(join(scratch, 'files-'));
  const oids = Array.from({ length: n }, () => {
    const b = randomBytes(65536);
    const oid = createHash('sha256').update(b).digest('hex');
    writeFileSync(join(dir, oid), b);
    return oid;
  });
  return { dir, oids };
}

/** A curl config file: one keep-alive transfer per oid, PUT of its file or GET. */
function curlConfig(path: string, port: number, dir: string, oids: readonly string[], put: boolean): string {
  const lines = oids.flatMap((oid, i) => [
    ...(i > 0 ? ['next'] : []),
    `url = "http://127.0.0.1:${port}/acme/game/objects/${oid}"`,
    ...(put ? [`upload-file = "${join(dir, oid)}"`] : []),
    'user = "x:tok"',
    'output = "/dev/null"',
    'silent',
    'fail',
  ]);
  writeFileSync(path, lines.join('\n'));
  return path;
}

const curls = (configs: readonly string[]): Promise<void> =>
  Promise.all(
    configs.map(
      (c) =>
        new Promise<void>((resolve, reject) =>
          spawn('curl', ['--config', c], { stdio: 'ignore' }).once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`curl --config ${c} exited with ${code}`)))),
        ),
    ),
  ).then(() => undefined);

/** Wall seconds and server CPU seconds (all threads, event loop) of `run`. */
async function timed(s: Server, run: () => Promise<void>): Promise<{ wall: number; cpu: number; main: number }> {
  const pid = s.child.pid!;
  const c0 = cpuSecondsOf(pid);
  const m0 = mainThreadCpuSecondsOf(pid);
  const t0 = performance.now();
  await run();
  return { wall: (performance.now() - t0) / 1000, cpu: cpuSecondsOf(pid) - c0, main: mainThreadCpuSecondsOf(pid) - m0 };
}

const split = (oids: readonly string[], k: number): string[][] => Array.from({ length: k }, (_, w) => oids.slice((w * oids.length) / k, ((w + 1) * oids.length) / k));

/** --warm: the server each build keeps for all its rounds. */
const kept = new Map<string, Server>();

async function curlRound(name: string, dist: string): Promise<Row> {
  const only = opt('only', 'seq,par,get').split(',');
  const warmServer = args.includes('--warm');
  const reused = kept.get(name);
  const s = reused ?? (await start(name, dist));
  if (warmServer) kept.set(name, s);
  try {
    if (reused === undefined) {
      // Not timed: the forge lookup, V8's first compilations, the first journal segment.
      const warm = objects(64);
      await curls([curlConfig(join(warm.dir, 'put'), s.port, warm.dir, warm.oids, true)]);
      await curls([curlConfig(join(warm.dir, 'get'), s.port, warm.dir, warm.oids, false)]);
      if (warmServer) {
        const first = objects(N);
        await curls([curlConfig(join(first.dir, 'seq'), s.port, first.dir, first.oids.slice(0, N / 2), true)]);
        await curls(split(first.oids.slice(N / 2), 8).map((part, w) => curlConfig(join(first.dir, `par-${w}`), s.port, first.dir, part, true)));
      }
    }
    if (warmServer) await journalRetired(s);
    const a = objects(N);
    const from = s.lines.length;
    const row: Row = { load0: load() };
    const putA = curlConfig(join(a.dir, 'put'), s.port, a.dir, a.oids, true);
    if (only.includes('seq')) {
      const m = await timed(s, () => curls([putA]));
      Object.assign(row, { seqMsPerObject: (m.wall * 1000) / N, seqServerCpuMs: (m.cpu * 1000) / N });
    } else await curls([putA]);
    if (only.includes('par')) {
      const b = objects(N);
      const configs = split(b.oids, 8).map((part, w) => curlConfig(join(b.dir, `put-${w}`), s.port, b.dir, part, true));
      const m = await timed(s, () => curls(configs));
      Object.assign(row, { parPerSecond: N / m.wall, parServerCpuMs: (m.cpu * 1000) / N });
    }
    if (only.includes('get')) {
      if (!args.includes('--no-retire')) await journalRetired(s);
      const configs = split(a.oids, 8).map((part, w) => curlConfig(join(a.dir, `get-${w}`), s.port, a.dir, part, false));
      const m = await timed(s, () => curls(configs));
      Object.assign(row, { getPerSecond: N / m.wall, getServerCpuMs: (m.cpu * 1000) / N, getEventLoopCpuMs: (m.main * 1000) / N });
    }
    if (args.includes('--v8-trace')) Object.assign(row, v8Events(s.lines.slice(from)));
    row.load1 = load();
    return row;
  } finally {
    if (!warmServer) await stop(s);
  }
}

/** Servers holding the same kind of repository, one per build, and a git sandbox that reaches them all. */
async function cloneSetup(): Promise<{ servers: Map<string, Server & { remote: string }>; env: NodeJS.ProcessEnv }> {
  const servers = new Map<string, Server & { remote: string }>();
  const started = new Map<string, Server>();
  for (const [name, dist] of builds) started.set(name, await start(name, dist));
  const home = join(scratch, 'home');
  const sb = await GitSandbox.create(home, `http://127.0.0.1:${[...started.values()][0]!.port}`, 'tok');
  writeFileSync(join(home, '.git-credentials'), [...started.values()].map((s) => `http://git:tok@127.0.0.1:${s.port}\n`).join(''), { mode: 0o600 });
  for (const [name, s] of started) {
    const p = await sb.newProject(join(scratch, `project-${name}`), `http://127.0.0.1:${s.port}/acme/game`);
    mkdirSync(join(p.work, 'assets'));
    for (let i = 0; i < N; i++) {
      // Staged as `git add` leaves an LFS file: its pointer in the tree, its bytes in .git/lfs.
      const b = randomBytes(65536);
      const oid = createHash('sha256').update(b).digest('hex');
      const dir = join(p.work, '.git/lfs/objects', oid.slice(0, 2), oid.slice(2, 4));
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, oid), b);
      writeFileSync(join(p.work, 'assets', `${i}.bin`), `version https://git-lfs.github.com/spec/v1\noid sha256:${oid}\nsize 65536\n`);
    }
    await sb.git(p.work, 'add', '.');
    await sb.git(p.work, 'commit', '-qm', 'assets');
    await sb.git(p.work, 'push', '-q', 'origin', 'main');
    await journalRetired(s);
    servers.set(name, { ...s, remote: p.remote });
  }
  spawnSync('sync');
  const shim = join(scratch, 'shim');
  mkdirSync(shim);
  const realLfs = spawnSync('bash', ['-c', 'command -v git-lfs'], { encoding: 'utf8' }).stdout.trim();
  writeFileSync(join(shim, 'git-lfs'), `#!/bin/bash\nexec /usr/bin/time -a -o "$LFS_TIME_FILE" -f "%U %S" ${realLfs} "$@"\n`);
  chmodSync(join(shim, 'git-lfs'), 0o755);
  return { servers, env: { ...sb.env, PATH: `${shim}:${process.env.PATH}` } };
}

async function cloneRound(s: Server & { remote: string }, env: NodeJS.ProcessEnv, tag: string): Promise<Row> {
  const dest = join(scratch, `clone-${tag}`);
  const lfsTimes = join(scratch, `lfs-${tag}`);
  const gitTimes = join(scratch, `git-${tag}`);
  writeFileSync(lfsTimes, '');
  const from = s.lines.length;
  const row: Row = { load0: load() };
  const m = await timed(s, () => new Promise<void>((resolve, reject) => {
    const command = ['/usr/bin/time', '-o', gitTimes, '-f', '%U %S', 'git', 'clone', '-q', s.remote, dest];
    if (s.pinned) command.unshift('taskset', '-c', '1');
    const git = spawn(command[0]!, command.slice(1), { env: { ...env, LFS_TIME_FILE: lfsTimes }, cwd: scratch, stdio: 'inherit' });
    git.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`git clone exited with ${code}`))));
  }));
  if (readdirSync(join(dest, 'assets')).length !== N || readFileSync(join(dest, 'assets', '0.bin')).length !== 65536) throw new Error('the clone lacks its files');
  const cpuOf = (line: string): number => line.split(' ').reduce((a, x) => a + Number(x), 0);
  const client = cpuOf(readFileSync(gitTimes, 'utf8').trim().split('\n').at(-1)!);
  const gitLfs = readFileSync(lfsTimes, 'utf8').trim().split('\n').filter(Boolean).reduce((a, l) => a + cpuOf(l), 0);
  Object.assign(row, { wallS: m.wall, clientCpuS: client, gitLfsCpuS: gitLfs, gitCpuS: client - gitLfs, serverCpuS: m.cpu, eventLoopCpuS: m.main, serverCpuMsPerObject: (m.cpu * 1000) / N });
  if (args.includes('--log-requests')) {
    await sleep(200); // the last request lines
    const ms = s.lines.slice(from).reduce((a, l) => a + ((/"msg":"request"/.test(l) && (JSON.parse(l) as { ms: number }).ms) || 0), 0);
    Object.assign(row, { inServerS: ms / 1000, requestsHeld: ms / 1000 / m.wall });
  }
  if (args.includes('--v8-trace')) Object.assign(row, v8Events(s.lines.slice(from)));
  row.load1 = load();
  rmSync(dest, { recursive: true, force: true });
  return row;
}

/** --v8-trace: what V8's traces say of one round (the lines the server printed during it). */
function v8Events(lines: readonly string[]): Row {
  const compiles = lines.flatMap((l) => {
    const m = /^\[completed compiling .* took ([\d.]+), ([\d.]+), ([\d.]+) ms\]/.exec(l);
    return m === null ? [] : [Number(m[1]) + Number(m[2]) + Number(m[3])];
  });
  const majors = lines.filter((l) => l.includes(': Mark-Compact '));
  return {
    scavenges: lines.filter((l) => l.includes(': Scavenge ')).length,
    majorGcs: majors.length,
    forcedGcs: majors.filter((l) => l.includes(' testing; ')).length,
    deoptimized: lines.filter((l) => l.startsWith('[marking dependent code ')).length,
    compiles: compiles.length,
    compileMs: compiles.reduce((a, b) => a + b, 0),
  };
}

const results = new Map<string, Row[]>();
const names = [...builds.keys()];
let clone: Awaited<ReturnType<typeof cloneSetup>> | null = null;
if (mode === 'clone') clone = await cloneSetup();
for (let r = 0; r < ROUNDS; r++) {
  for (const name of r % 2 === 0 ? names : [...names].reverse()) {
    const row = clone === null ? await curlRound(name, builds.get(name)!) : await cloneRound(clone.servers.get(name)!, clone.env, `${name}-${r}`);
    if (!results.has(name)) results.set(name, []);
    results.get(name)!.push(row);
    process.stdout.write(`${name} round ${r + 1}: ${Object.entries(row).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(', ')}\n`);
  }
}
for (const [name, rows] of results) {
  const keys = Object.keys(rows[0]!).filter((k) => !k.startsWith('load'));
  process.stdout.write(`${name} medians of ${rows.length}: ${keys.map((k) => `${k} ${median(rows.map((x) => x[k]!)).toFixed(3)}`).join(', ')}; load ${rows.map((x) => `${x.load0!.toFixed(1)}–${x.load1!.toFixed(1)}`).join(', ')}\n`);
}
for (const s of [...(clone?.servers.values() ?? []), ...kept.values()]) await stop(s);
await forge.stop();
rmSync(scratch, { recursive: true, force: true });

/**
 * The soak: a longer run of the fault suite's kill rounds, then 1,000 idle keep-alive connections and
 * a 10,000-request burst, against a real server process on 127.0.0.1 with its own data directory.
 * Writes a table to stdout and native-bench/results/soak-latest.md (plus .json).
 *
 *   npm run bench:soak -- [--rounds=12] [--compression=zstd:3] [--seed=1]
 *
 * Every loop has a count and the whole run an overall deadline; nothing leaves 127.0.0.1.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { cpus } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { Pool, request } from 'undici';
import { MiB, SeededBytes, mulberry32 } from './lib/data-gen.js';
import { fromProduct, GitHubEmulator, startServer, tmpDir, type RunningServer } from './lib/product.js';
import { percentile } from './lib/stats.js';

const { filesUnder } = await fromProduct<typeof import('../dist/test/helpers/fs-events.js')>('test/helpers/fs-events.js');

const here = dirname(fileURLToPath(import.meta.url));
const REPO = 'soak/store';
const TOKEN = 'soak-writer';
const AUTH = `Basic ${Buffer.from(`soak:${TOKEN}`).toString('base64')}`;
const LFS = 'application/vnd.git-lfs+json';
const KiB = 1 << 10;
/** Soft limit on open files the run needs: 1,000 idle sockets on each side plus the rest. */
const FD_LIMIT = 4096;

const arg = (name: string, fallback: string): string => new RegExp(`--${name}=(\\S+)`).exec(process.argv.join(' '))?.[1] ?? fallback;
const ROUNDS = Number(arg('rounds', '12'));
const COMPRESSION = arg('compression', 'off');
const SEED = Number(arg('seed', '1'));
const CLIENTS = 4;
const PER_CLIENT = 4;
/** Longest wait after the acknowledgement count is reached before the SIGKILL. */
const KILL_DELAY_MAX_MS = 150;
const IDLE_CONNECTIONS = 1000;
const IDLE_OPS = 200;
const BURST = 10_000;
const BURST_CONNECTIONS = 64;
/** The whole run; each phase also has its own count. */
const DEADLINE = Date.now() + 40 * 60_000;

function checkDeadline(what: string): void {
  if (Date.now() > DEADLINE) throw new Error(`overall deadline passed during ${what}`);
}

/** One object of the soak: its bytes are regenerated from (seed, size) whenever they are needed. */
interface Item {
  readonly key: string;
  readonly size: number;
  readonly oid: string;
}

function item(key: string, size: number): Item {
  return { key, size, oid: new SeededBytes(key).sha256(size) };
}
const bytesOf = (it: Item): Buffer => new SeededBytes(it.key).bytes(it.size);
const objectUrl = (server: RunningServer, oid: string): string => `${server.url}/${REPO}/objects/${oid}`;

const ms = (n: number): string => (Number.isFinite(n) ? `${n.toFixed(1)} ms` : 'n/a');
const loadavg = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' / ');
function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

async function put(server: RunningServer, it: Item, data: Buffer = bytesOf(it)): Promise<number> {
  const r = await request(objectUrl(server, it.oid), { method: 'PUT', headers: { authorization: AUTH }, body: data });
  await r.body.dump();
  return r.statusCode;
}

/** GET and sha256 of the body: 'ok', 'absent' (404), 'wrong' (200 with other bytes) or 'status N'. */
async function verify(server: RunningServer, it: Item): Promise<string> {
  const r = await request(objectUrl(server, it.oid), { headers: { authorization: AUTH } });
  if (r.statusCode !== 200) {
    await r.body.dump();
    return r.statusCode === 404 ? 'absent' : `status ${r.statusCode}`;
  }
  const h = createHash('sha256');
  let n = 0;
  for await (const c of r.body) {
    h.update(c as Buffer);
    n += (c as Buffer).length;
  }
  return n === it.size && h.digest('hex') === it.oid ? 'ok' : 'wrong';
}

const stagingFiles = (dataDir: string): string[] =>
  readdirSync(join(dataDir, 'staging'), { withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => e.name);

/** Object files that the index (opened read-only beside the running server) has no row for. */
async function orphanFiles(dataDir: string): Promise<string[]> {
  const files = (await filesUnder(join(dataDir, 'objects'))).map((p) => basename(p)).filter((n) => /^[0-9a-f]{64}$/.test(n));
  const db = new Database(join(dataDir, 'index.sqlite'), { readonly: true, fileMustExist: true });
  try {
    const known = db.prepare('SELECT 1 FROM objects WHERE oid = ?');
    return files.filter((oid) => known.get(oid) === undefined);
  } finally {
    db.close();
  }
}

/** Sizes from 64 KiB to 20 MiB, log-uniform, so both journaled small objects and large files occur. */
function sizeFrom(rand: () => number): number {
  return Math.round(Math.exp(Math.log(64 * KiB) + rand() * (Math.log(20 * MiB) - Math.log(64 * KiB))));
}

interface RoundResult {
  round: number;
  uploads: number;
  acked: number;
  killAfterAcks: number;
  killDelayMs: number;
  ackedBeforeKill: number;
  inFlightAtKill: number;
  unackedComplete: number;
  unackedAbsent: number;
  partial: number;
  lost: number;
  stagingLeftByKill: number;
  stagingLeftAfterStart: number;
  orphansSweptAtStart: number;
  orphansAfterStart: number;
  restartMs: number;
}

interface KillPhase {
  rounds: RoundResult[];
  everAcked: number;
  lostFinal: number;
  corruptFinal: number;
  retriedAcked: number;
  finalOrphans: number;
}

/**
 * Kill rounds: CLIENTS clients each upload PER_CLIENT objects one after another; the server gets
 * SIGKILL after a seeded number of acknowledgements plus a seeded delay, and is started again.
 */
async function killRounds(env: Record<string, string>, dataDir: string, rand: () => number): Promise<{ server: RunningServer; phase: KillPhase; all: Item[] }> {
  let server = await startServer(env, { dataDir });
  const rounds: RoundResult[] = [];
  const all: Item[] = [];
  const ackedEver = new Set<Item>();
  for (let round = 1; round <= ROUNDS; round++) {
    checkDeadline(`kill round ${round}`);
    const items = Array.from({ length: CLIENTS * PER_CLIENT }, (_, i) => item(`soak-${SEED}-${round}-${i}`, sizeFrom(rand)));
    all.push(...items);
    // Uploads of 60 MiB end within a second on loopback: a short delay after a seeded number of
    // acknowledgements keeps most kills while bodies are arriving, renamed or being recorded.
    const killAfterAcks = Math.floor(rand() * (items.length - 2));
    const killDelayMs = Math.round(rand() * KILL_DELAY_MAX_MS);
    const acked = new Set<Item>();
    let killed = false;
    let inFlight = 0;
    let reached: () => void = () => undefined;
    const point = new Promise<void>((r) => (reached = r));
    if (killAfterAcks === 0) reached();
    const clients = Array.from({ length: CLIENTS }, async (_, c) => {
      for (let k = 0; k < PER_CLIENT && !killed; k++) {
        const it = items[c * PER_CLIENT + k]!;
        inFlight++;
        const status = await put(server, it).catch(() => 0);
        inFlight--;
        if (status === 200 && !killed) {
          acked.add(it);
          if (acked.size >= killAfterAcks) reached();
        } else if (status === 200) acked.add(it); // answered before the kill reached the socket
      }
    });
    const uploads = Promise.allSettled(clients);
    await Promise.race([point, uploads]);
    await new Promise((r) => setTimeout(r, killDelayMs));
    const ackedBeforeKill = acked.size;
    const inFlightAtKill = inFlight;
    killed = true;
    await server.stop('SIGKILL');
    await uploads;
    for (const it of acked) ackedEver.add(it);
    const litter = stagingFiles(dataDir);
    const t0 = performance.now();
    server = await startServer(env, { dataDir });
    const restartMs = performance.now() - t0;
    const staging = stagingFiles(dataDir).filter((n) => litter.includes(n));
    const swept = server.logs.join('\n').match(/removed object files no reference points to[^\n]*"count":(\d+)/);
    let unackedComplete = 0;
    let unackedAbsent = 0;
    let partial = 0;
    let lost = 0;
    for (const it of items) {
      const state = await verify(server, it);
      if (acked.has(it)) {
        if (state !== 'ok') lost++;
      } else if (state === 'ok') unackedComplete++;
      else if (state === 'absent') unackedAbsent++;
      else partial++;
      if (state !== 'ok' && acked.has(it)) console.log(`LOST round ${round}: ${it.key} size ${it.size} oid ${it.oid}: ${state}`);
      if (state !== 'ok' && state !== 'absent') console.log(`PARTIAL round ${round}: ${it.key} size ${it.size}: ${state}`);
    }
    const orphans = await orphanFiles(dataDir);
    const r: RoundResult = {
      round,
      uploads: items.length,
      acked: acked.size,
      killAfterAcks,
      killDelayMs,
      ackedBeforeKill,
      inFlightAtKill,
      unackedComplete,
      unackedAbsent,
      partial,
      lost,
      stagingLeftByKill: litter.length,
      stagingLeftAfterStart: staging.length,
      orphansSweptAtStart: swept ? Number(swept[1]) : 0,
      orphansAfterStart: orphans.length,
      restartMs,
    };
    rounds.push(r);
    console.log(
      `round ${String(round).padStart(2)}: ${r.acked}/${r.uploads} acked (kill after ${killAfterAcks} acks + ${killDelayMs} ms, ${inFlightAtKill} in flight), ` +
        `lost ${lost}, partial ${partial}, unacked complete ${unackedComplete} / absent ${unackedAbsent}, staging ${litter.length}→${staging.length}, ` +
        `orphans swept ${r.orphansSweptAtStart}, left ${orphans.length}, restart ${ms(restartMs)}`,
    );
  }
  // Every object ever acknowledged, read back whole after all the rounds.
  let lostFinal = 0;
  let corruptFinal = 0;
  for (const it of ackedEver) {
    checkDeadline('final check');
    const state = await verify(server, it);
    if (state === 'absent' || state.startsWith('status')) lostFinal++;
    else if (state === 'wrong') corruptFinal++;
  }
  // What the client never heard back about, it sends again: each must be accepted.
  let retriedAcked = 0;
  for (const it of all.filter((i) => !ackedEver.has(i))) if ((await put(server, it)) === 200) retriedAcked++;
  const finalOrphans = (await orphanFiles(dataDir)).length;
  return { server, all, phase: { rounds, everAcked: ackedEver.size, lostFinal, corruptFinal, retriedAcked, finalOrphans } };
}

interface IdlePhase {
  opened: number;
  openFailed: number;
  ops: number;
  opErrors: number;
  p50: number;
  p99: number;
  max: number;
  healthDuringMs: number;
  closedByServer: number;
  closedAfterMinS: number;
  closedAfterMedianS: number;
  closedAfterMaxS: number;
  watchedS: number;
}

/** Opens one keep-alive connection, makes one request on it, and leaves it idle. */
function idleConnection(port: number, onClose: (idleSince: number) => void): Promise<boolean> {
  return new Promise((resolveOpen) => {
    const sock: Socket = connect({ host: '127.0.0.1', port });
    let idleSince = 0;
    let answered = false;
    sock.setTimeout(30_000, () => sock.destroy());
    sock.on('connect', () => sock.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n'));
    sock.on('data', () => {
      idleSince = performance.now();
      if (!answered) {
        answered = true;
        resolveOpen(true);
      }
    });
    sock.on('error', () => undefined);
    sock.on('close', () => {
      if (!answered) resolveOpen(false);
      else onClose(idleSince);
    });
    idleSockets.push(sock);
  });
}
const idleSockets: Socket[] = [];

async function idlePhase(server: RunningServer, items: Item[]): Promise<IdlePhase> {
  const closedAfter: number[] = [];
  let opened = 0;
  let openFailed = 0;
  // In slices of 100, so the listen backlog is not the thing measured.
  for (let i = 0; i < IDLE_CONNECTIONS; i += 100) {
    checkDeadline('idle connections');
    const ok = await Promise.all(Array.from({ length: 100 }, () => idleConnection(server.port, (since) => closedAfter.push((performance.now() - since) / 1000))));
    opened += ok.filter(Boolean).length;
    openFailed += ok.filter((x) => !x).length;
  }
  const watchStart = performance.now();
  // 200 normal operations meanwhile: uploads of new small objects and downloads of stored ones.
  const small = items.filter((i) => i.size <= 2 * MiB).slice(0, 20);
  const lat: number[] = [];
  let opErrors = 0;
  const pool = new Pool(server.url, { connections: 4 });
  for (let i = 0; i < IDLE_OPS; i++) {
    checkDeadline('idle phase operations');
    const t0 = performance.now();
    try {
      if (i % 2 === 0 || small.length === 0) {
        const it = item(`soak-idle-${SEED}-${COMPRESSION}-${i}`, 64 * KiB + i * 997);
        const r = await pool.request({ path: `/${REPO}/objects/${it.oid}`, method: 'PUT', headers: { authorization: AUTH }, body: bytesOf(it) });
        await r.body.dump();
        if (r.statusCode !== 200) opErrors++;
      } else {
        const it = small[i % small.length]!;
        const r = await pool.request({ path: `/${REPO}/objects/${it.oid}`, method: 'GET', headers: { authorization: AUTH } });
        const body = Buffer.from(await r.body.arrayBuffer());
        if (r.statusCode !== 200 || body.length !== it.size) opErrors++;
      }
    } catch {
      opErrors++;
    }
    lat.push(performance.now() - t0);
  }
  const t0 = performance.now();
  await (await pool.request({ path: '/health', method: 'GET' })).body.dump();
  const healthDuringMs = performance.now() - t0;
  await pool.close();
  // Watch the idle ones until the server has closed them all, or 30 s after the operations.
  const watchUntil = performance.now() + 30_000;
  for (let i = 0; i < 300 && closedAfter.length < opened && performance.now() < watchUntil; i++) await new Promise((r) => setTimeout(r, 100));
  const watchedS = (performance.now() - watchStart) / 1000;
  const closedByServer = closedAfter.length;
  for (const s of idleSockets) s.destroy();
  lat.sort((a, b) => a - b);
  closedAfter.sort((a, b) => a - b);
  return {
    opened,
    openFailed,
    ops: IDLE_OPS,
    opErrors,
    p50: percentile(lat, 50),
    p99: percentile(lat, 99),
    max: lat[lat.length - 1] ?? NaN,
    healthDuringMs,
    closedByServer,
    closedAfterMinS: closedAfter[0] ?? NaN,
    closedAfterMedianS: percentile(closedAfter, 50),
    closedAfterMaxS: closedAfter[closedAfter.length - 1] ?? NaN,
    watchedS,
  };
}

interface BurstPhase {
  requests: number;
  seconds: number;
  perSecond: number;
  byStatus: Record<string, number>;
  p50: number;
  p99: number;
  max: number;
  rssBeforeMiB: number;
  rssAfterMiB: number;
}

/** BURST requests, a third each batch, small GET and /health, from BURST_CONNECTIONS keep-alive connections. */
async function burstPhase(server: RunningServer, items: Item[]): Promise<BurstPhase> {
  const pid = server.child.pid!;
  const rssBeforeMiB = rssMiB(pid);
  // Small objects to fetch: stored now, whatever the kill rounds left.
  const small = Array.from({ length: 16 }, (_, i) => item(`soak-burst-${SEED}-${COMPRESSION}-${i}`, 4 * KiB + i));
  for (const it of small) if ((await put(server, it)) !== 200) throw new Error('could not store the burst objects');
  const batchBody = JSON.stringify({ operation: 'download', transfers: ['basic'], objects: items.slice(0, 20).map((i) => ({ oid: i.oid, size: i.size })) });
  const pool = new Pool(server.url, { connections: BURST_CONNECTIONS, pipelining: 1 });
  const byStatus: Record<string, number> = {};
  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  const worker = async (): Promise<void> => {
    while (next < BURST && Date.now() < DEADLINE) {
      const n = next++;
      const s = performance.now();
      let key: string;
      try {
        const kind = n % 3;
        const r =
          kind === 0
            ? await pool.request({ path: `/${REPO}/objects/batch`, method: 'POST', headers: { authorization: AUTH, 'content-type': LFS, accept: LFS }, body: batchBody })
            : kind === 1
              ? await pool.request({ path: `/${REPO}/objects/${small[n % small.length]!.oid}`, method: 'GET', headers: { authorization: AUTH } })
              : await pool.request({ path: '/health', method: 'GET' });
        await r.body.dump();
        key = String(r.statusCode);
      } catch (e) {
        key = (e as { code?: string }).code ?? 'error';
      }
      lat.push(performance.now() - s);
      byStatus[key] = (byStatus[key] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: BURST_CONNECTIONS }, worker));
  const seconds = (performance.now() - t0) / 1000;
  await pool.close();
  lat.sort((a, b) => a - b);
  return {
    requests: lat.length,
    seconds,
    perSecond: lat.length / seconds,
    byStatus,
    p50: percentile(lat, 50),
    p99: percentile(lat, 99),
    max: lat[lat.length - 1] ?? NaN,
    rssBeforeMiB,
    rssAfterMiB: rssMiB(pid),
  };
}

function report(meta: Record<string, string | number>, kill: KillPhase, idle: IdlePhase, burst: BurstPhase): string {
  const lostTotal = kill.rounds.reduce((n, r) => n + r.lost, 0) + kill.lostFinal + kill.corruptFinal;
  const partial = kill.rounds.reduce((n, r) => n + r.partial, 0);
  const sum = (f: (r: RoundResult) => number): number => kill.rounds.reduce((n, r) => n + f(r), 0);
  const lines = [
    `## Stowage soak — ${meta.when}`,
    '',
    `Command: \`${meta.command}\``,
    '',
    `Machine: ${meta.nproc} cores (nproc), node ${process.version}; compression ${COMPRESSION}; seed ${SEED}; load average at start ${meta.loadStart}, at end ${meta.loadEnd}; run took ${meta.seconds} s.`,
    '',
    `### Kill rounds (${kill.rounds.length} × ${CLIENTS} clients × ${PER_CLIENT} uploads of 64 KiB…20 MiB, SIGKILL at a seeded point)`,
    '',
    '| Round | Acked | Kill after | In flight at kill | Lost | Partial | Unacked complete / absent | Staging left by kill → after start | Orphans swept at start / left | Restart |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...kill.rounds.map(
      (r) =>
        `| ${r.round} | ${r.acked}/${r.uploads} | ${r.killAfterAcks} acks + ${r.killDelayMs} ms | ${r.inFlightAtKill} | ${r.lost} | ${r.partial} | ${r.unackedComplete} / ${r.unackedAbsent} | ${r.stagingLeftByKill} → ${r.stagingLeftAfterStart} | ${r.orphansSweptAtStart} / ${r.orphansAfterStart} | ${ms(r.restartMs)} |`,
    ),
    '',
    `Totals: ${kill.everAcked} acknowledged; ${kill.rounds.filter((r) => r.inFlightAtKill > 0).length} of ${kill.rounds.length} kills with uploads in flight; re-read after all rounds: ${kill.lostFinal} missing, ${kill.corruptFinal} corrupt; ${partial} partial objects visible; ` +
      `${sum((r) => r.stagingLeftByKill)} staging files left by kills, ${sum((r) => r.stagingLeftAfterStart)} after start; ` +
      `${sum((r) => r.orphansSweptAtStart)} orphan object files swept at start, ${sum((r) => r.orphansAfterStart)} left after start, ${kill.finalOrphans} at the end; ` +
      `${kill.retriedAcked} of ${kill.rounds.reduce((n, r) => n + r.uploads - r.acked, 0)} unacknowledged uploads accepted on retry.`,
    '',
    `**${lostTotal === 0 && partial === 0 ? 'PASS' : 'FAIL'}: acknowledged objects lost: ${lostTotal}** (partial visible: ${partial})`,
    '',
    `### ${IDLE_CONNECTIONS} idle keep-alive connections`,
    '',
    '| Measure | Value |',
    '|---|---|',
    `| idle connections opened (one /health each) | ${idle.opened} (${idle.openFailed} failed) |`,
    `| ${idle.ops} operations meanwhile (64 KiB… PUT / GET alternating) | p50 ${ms(idle.p50)}, p99 ${ms(idle.p99)}, max ${ms(idle.max)}; ${idle.opErrors} errors |`,
    `| /health after them | ${ms(idle.healthDuringMs)} |`,
    `| idle connections closed by the server | ${idle.closedByServer} of ${idle.opened} within ${idle.watchedS.toFixed(1)} s |`,
    `| closed after idle for | min ${idle.closedAfterMinS.toFixed(1)} s, median ${idle.closedAfterMedianS.toFixed(1)} s, max ${idle.closedAfterMaxS.toFixed(1)} s |`,
    '',
    `### ${BURST.toLocaleString('en')}-request burst (${BURST_CONNECTIONS} keep-alive connections; batch of 20 / GET 4 KiB / health)`,
    '',
    '| Measure | Value |',
    '|---|---|',
    `| requests | ${burst.requests} in ${burst.seconds.toFixed(2)} s = ${burst.perSecond.toFixed(0)} req/s |`,
    `| by status | ${Object.entries(burst.byStatus)
      .map(([k, v]) => `${k}: ${v}`)
      .join(', ')} |`,
    `| latency | p50 ${ms(burst.p50)}, p99 ${ms(burst.p99)}, max ${ms(burst.max)} |`,
    `| server RSS | ${burst.rssBeforeMiB.toFixed(1)} MiB before, ${burst.rssAfterMiB.toFixed(1)} MiB after |`,
    '',
  ];
  return lines.join('\n');
}

async function main(): Promise<void> {
  // 1,000 sockets on each side need more than a default soft limit of 1024; node cannot raise its
  // own, so the run starts again under a shell that does (the server inherits it).
  if (process.env.SOAK_FD_RAISED !== '1') {
    const r = spawnSync('sh', ['-c', `ulimit -n ${FD_LIMIT} 2>/dev/null || ulimit -n hard; exec "$0" "$@"`, process.execPath, ...process.argv.slice(1)], {
      stdio: 'inherit',
      env: { ...process.env, SOAK_FD_RAISED: '1' },
    });
    process.exit(r.status ?? 1);
  }
  const started = Date.now();
  const loadStart = loadavg();
  const forge = new GitHubEmulator();
  forge.repos.set(REPO, { private: true });
  forge.tokens.set(TOKEN, { login: 'soak', repos: { [REPO]: 'push' } });
  await forge.start();
  const dataDir = tmpDir('stowage-soak-');
  const env = { SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: COMPRESSION };
  console.log(`soak: ${ROUNDS} rounds, compression ${COMPRESSION}, seed ${SEED}, ${cpus().length} cores, load ${loadStart}, data ${dataDir}`);
  const { server, phase: kill, all } = await killRounds(env, dataDir, mulberry32(SEED));
  try {
    console.log('idle connections…');
    const idle = await idlePhase(server, all);
    console.log('burst…');
    const burst = await burstPhase(server, all);
    const meta = {
      when: new Date().toISOString(),
      command: `npm run bench:soak${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
      nproc: spawnSync('nproc').stdout.toString().trim(),
      loadStart,
      loadEnd: loadavg(),
      seconds: Math.round((Date.now() - started) / 1000),
    };
    const md = report(meta, kill, idle, burst);
    console.log(`\n${md}`);
    const out = resolve(here, '../results');
    if (!existsSync(out)) mkdirSync(out, { recursive: true });
    const suffix = COMPRESSION === 'off' ? '' : `-${COMPRESSION.replace(':', '')}`;
    writeFileSync(join(out, `soak-latest${suffix}.md`), `${md}\n`);
    writeFileSync(join(out, `soak-latest${suffix}.json`), `${JSON.stringify({ meta, compression: COMPRESSION, seed: SEED, kill, idle, burst }, null, 2)}\n`);
  } finally {
    await server.stop();
    await forge.stop();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});

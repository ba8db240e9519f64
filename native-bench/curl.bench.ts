/**
 * Uploads and downloads through Debian's curl, as a user would script them: its default buffer
 * sizes, `Expect: 100-continue` as it sends it on a PUT, one keep-alive process for a sequence of
 * objects, one process per parallel client. Batches go through undici (the bench's LFS client);
 * every byte of an object goes through curl.
 */
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { closeSync, fdatasyncSync, linkSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { GiB, MiB, SeededBytes } from './lib/data-gen.js';
import { PARALLEL_CURLS, runClient, type ClientRun } from './lib/client-run.js';
import { cpuSecondsOf, machineBusySeconds } from './lib/proc-stats.js';
import type { LfsAction, LfsClient } from './lib/lfs-client.js';
import { fmt } from './lib/report.js';
import { ddBesideBusy, mbps, startPeer, type BenchContext } from './limits.bench.js';
import type { ClientRound, RealClientSession } from './real-clients.bench.js';
import { journalRetired, median, memObject, TOKEN, type MemObject } from './server.bench.js';

const USER = `bench:${TOKEN}`;
/** A config-file string: curl reads backslash escapes inside double quotes. */
const q = (s: string): string => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/** Rounds per row: an odd number, so the median is one of them. */
export const clientRounds = (ctx: BenchContext): number => (ctx.quick ? 1 : 3);

/**
 * Rounds of each small-object kind run first on a server just started, left out of the medians: V8's
 * optimizing compiler takes up a function only after some thousands of calls of it, so the request
 * path is still being compiled over the first few thousand requests, while a server that has been up
 * serves warm. `small-ab.js curl --warm --v8-trace` (one round of each left out, as before) counted
 * in the next rounds 59 TurboFan compiles (328 ms of CPU), then 15 (105 ms), then 3 (10–27 ms), and
 * server CPU per sequential PUT 1.02, 0.68, 0.56, 0.55 ms: three rounds of each go first.
 */
export const warmUpRounds = (ctx: BenchContext): number => (ctx.quick ? 1 : 3);

/** `curl -T file` of one object to its upload action, with the action's headers; throws unless 200. */
function curlPut(file: string, action: LfsAction): Promise<ClientRun> {
  const headers = Object.entries(action.header ?? {}).flatMap(([k, v]) => ['-H', `${k}: ${v}`]);
  return checked(runClient(['curl', '-sS', '-u', USER, ...headers, '-T', file, '-o', '/dev/null', '-w', WRITE_OUT, action.href]), 1);
}

/** `curl -o /dev/null` of one object; throws unless 200. */
export function curlGet(href: string): Promise<ClientRun> {
  return checked(runClient(['curl', '-sS', '-u', USER, '-o', '/dev/null', '-w', WRITE_OUT, href]), 1);
}

/** What curl writes after each transfer: the status and how many connections it opened for it. */
const WRITE_OUT = '%{http_code} %{num_connects}\\n';

/** Counts the `WRITE_OUT` lines that say 200, and the connections curl opened for them. */
function tally(stdout: string): { ok: number; connects: number } {
  let ok = 0;
  let connects = 0;
  for (const m of stdout.matchAll(/^(\d{3}) (\d+)$/gm)) {
    if (m[1] === '200') ok++;
    connects += Number(m[2]);
  }
  return { ok, connects };
}

/** Every transfer must answer 200; returns the run and the connections curl opened. */
async function checked(run: Promise<ClientRun>, expected: number): Promise<ClientRun & { connects: number }> {
  const r = await run;
  const { ok, connects } = tally(r.stdout);
  if (ok !== expected) throw new Error(`curl: ${ok} of ${expected} transfers answered 200 (${r.stdout.replace(/\s+/g, ' ').slice(0, 200)}) ${r.stderr.slice(-500)}`);
  return { ...r, connects };
}

/** A curl config that PUTs each file to its href in turn over one keep-alive connection. */
function putConfig(pairs: { file: string; href: string }[]): string {
  const lines = ['silent', 'show-error', `user = ${q(USER)}`, `write-out = "${WRITE_OUT}"`];
  for (const p of pairs) lines.push(`url = ${q(p.href)}`, `upload-file = ${q(p.file)}`, 'output = "/dev/null"');
  return `${lines.join('\n')}\n`;
}

/**
 * The 64 KiB objects of one round, written as files, and the batches (per 100, as git-lfs) for them
 * through `client`; `settled` waits out what the previous round left the server to do.
 */
export async function smallRound(ctx: BenchContext, client: LfsClient, settled: () => Promise<unknown>, tag: string, n: number): Promise<{ dir: string; pairs: { file: string; href: string }[]; batchMs: number }> {
  const dir = join(ctx.scratch, `curl-${tag}`);
  mkdirSync(dir, { recursive: true });
  const pool = new SeededBytes(`curl-${tag}`).bytes(n * 65536);
  const objs: MemObject[] = [];
  for (let i = 0; i < n; i++) {
    const o = memObject(pool.subarray(i * 65536, (i + 1) * 65536));
    writeFileSync(join(dir, `${i}.bin`), o.data);
    objs.push(o);
  }
  await settled();
  const pairs: { file: string; href: string }[] = [];
  const t0 = performance.now();
  for (let g = 0; g < n; g += 100) {
    const entries = await client.batch('upload', objs.slice(g, g + 100).map((o) => ({ oid: o.oid, size: o.size })));
    entries.forEach((e, i) => pairs.push({ file: join(dir, `${g + i}.bin`), href: e.actions!.upload!.href }));
  }
  return { dir, pairs, batchMs: performance.now() - t0 };
}

/**
 * A small-object round: the TCP connections curl opened, the batches' time (in the figure), and the
 * same PUTs' figure against a server that stores nothing (null-peer.ts), run right after it.
 */
type SmallRound = ClientRound & { connects: number; batchMs: number; floor: number; durable: number; laterMs: number };
/** The yardstick peers' ports: the null peer (stores nothing) and the durable minimum (durable-peer.ts). */
interface Peers {
  readonly floor: number;
  readonly durable: number;
}

/** The pairs' PUTs sent to the null peer instead: same files, paths and headers, another port. */
const toFloor = (pairs: { file: string; href: string }[], port: number): { file: string; href: string }[] =>
  pairs.map((p) => ({ file: p.file, href: p.href.replace(/^http:\/\/[^/]+/, `http://127.0.0.1:${port}`) }));

const smallDetail = (rounds: SmallRound[], n: number, warm: readonly SmallRound[], unit: string): string =>
  (warm.length === 0 ? '' : `${warmUpDetail(warm, n, 'round', unit)}; `) +
  `TCP connections opened per round: ${rounds.map((r) => r.connects).join(', ')}; batches (undici) per round ${rounds.map((r) => `${fmt(r.batchMs)} ms`).join(', ')}; ` +
  `server CPU spent later writing each object out of the journal to a file of its own (not in the figure): ${rounds.map((r) => `${fmt(r.laterMs)} ms`).join(', ')} per object`;

/** The warm-up rounds' figures and server CPU, for a row's detail (see warmUpRounds). */
export function warmUpDetail(warm: readonly ClientRound[], n: number, what: string, unit: string): string {
  return (
    `${warm.length === 1 ? `the first ${what}` : `the first ${warm.length} ${what}s`} after the server started, left out (warm-up): ${warm.map((w) => fmt(w.value)).join(', ')} ${unit}, ` +
    `server CPU per 1000 objects ${warm.map((w) => `${fmt((w.span.serverCpuS * 1e6) / n)} ms`).join(', ')}`
  );
}

/**
 * Ends a small-object round: what its objects cost the server after their acknowledgement (its CPU
 * from now until the journal has written them to files of their own, retirement, in the lull that
 * follows, per object; the round's own figure leaves it out, a steady stream of small uploads pays
 * both), then its files are removed.
 */
async function endRound(session: RealClientSession, dir: string, n: number, round: Omit<SmallRound, 'laterMs'>): Promise<SmallRound> {
  const before = cpuSecondsOf(session.s.pid);
  await journalRetired(session.s.server.dataDir);
  const laterMs = ((cpuSecondsOf(session.s.pid) - before) * 1000) / n;
  rmSync(dir, { recursive: true, force: true });
  return { ...round, laterMs };
}

/** One round of n × 64 KiB through one curl process: ms per object, batches included. */
async function seqRound(session: RealClientSession, r: number | string, n: number, peers: Peers): Promise<SmallRound> {
  const { dir, pairs, batchMs } = await smallRound(session.ctx, session.s.client, () => journalRetired(session.s.server.dataDir), `seq-${r}`, n);
  const config = join(dir, 'put.curlrc');
  writeFileSync(config, putConfig(pairs));
  // Batches (undici) are timed apart and added: the judged figure is batch + PUT per object.
  let connects = 0;
  const round = await session.round(async () => {
    const run = await checked(runClient(['curl', '--config', config]), n);
    connects = run.connects;
    return run;
  }, (ms) => (ms + batchMs) / n);
  const peerMs = async (port: number, tag: string): Promise<number> => {
    const config = join(dir, `${tag}.curlrc`);
    writeFileSync(config, putConfig(toFloor(pairs, port)));
    return (await checked(runClient(['curl', '--config', config]), n)).ms / n;
  };
  const floor = await peerMs(peers.floor, 'floor');
  const durable = await peerMs(peers.durable, 'durable');
  return endRound(session, dir, n, { ...round, connects, batchMs, floor, durable });
}

/** One round of n × 64 KiB through 8 curl processes at once: objects per second, batches included. */
async function parRound(session: RealClientSession, r: number | string, n: number, peers: Peers): Promise<SmallRound> {
  // The previous round's objects go to files of their own in a lull; not measured against this one.
  const { dir, pairs, batchMs } = await smallRound(session.ctx, session.s.client, () => journalRetired(session.s.server.dataDir), `par-${r}`, n);
  let connects = 0;
  const round = await session.round(
    async () => {
      const run = await parallelPuts(dir, pairs);
      connects = run.connects;
      return run;
    },
    (ms) => n / ((ms + batchMs) / 1000),
  );
  const floor = n / ((await parallelPuts(dir, toFloor(pairs, peers.floor), 'floor')).ms / 1000);
  const durable = n / ((await parallelPuts(dir, toFloor(pairs, peers.durable), 'durable')).ms / 1000);
  return endRound(session, dir, n, { ...round, connects, batchMs, floor, durable });
}

/** Every pair PUT by 8 curl processes at once (a keep-alive connection each); throws unless all answer 200. */
export async function parallelPuts(dir: string, pairs: { file: string; href: string }[], tag = 'put'): Promise<ClientRun & { connects: number }> {
  const configs = Array.from({ length: 8 }, (_, w) => {
    const path = join(dir, `${tag}-${w}.curlrc`);
    writeFileSync(path, putConfig(pairs.filter((_, i) => i % 8 === w)));
    return path;
  });
  const run = await runClient(configs, { script: PARALLEL_CURLS });
  const t = configs.map((c) => tally(readFileSync(`${c}.out`, 'utf8')));
  const ok = t.reduce((a, b) => a + b.ok, 0);
  if (ok !== pairs.length) throw new Error(`8 curl processes: ${ok} of ${pairs.length} PUTs answered 200`);
  return { ...run, connects: t.reduce((a, b) => a + b.connects, 0) };
}

/** Whether curl sends `Expect: 100-continue` on a 64 KiB PUT, and whether the server answers 100. */
async function expectProbe(session: RealClientSession): Promise<string> {
  const dir = join(session.ctx.scratch, 'curl-probe');
  mkdirSync(dir, { recursive: true });
  const o = memObject(new SeededBytes('curl-probe').bytes(65536));
  const file = join(dir, 'probe.bin');
  writeFileSync(file, o.data);
  const [e] = await session.s.client.batch('upload', [{ oid: o.oid, size: o.size }]);
  const r = await runClient(['curl', '-sS', '-v', '-u', USER, '-T', file, '-o', '/dev/null', e!.actions!.upload!.href]);
  rmSync(dir, { recursive: true, force: true });
  const sent = /^> Expect: 100-continue/im.test(r.stderr);
  const got = /^< HTTP\/1\.1 100/im.test(r.stderr);
  return `curl sends Expect: 100-continue on a 64 KiB PUT: ${sent ? 'yes' : 'no'}${sent ? `; the server answers 100 Continue: ${got ? 'yes' : 'no'}` : ''}`;
}

/**
 * The yardsticks of the small-object rows, the same curl runs right after each of our rounds, so
 * under the same load: a server that stores nothing (uWS answering every PUT at once: the floor of
 * curl, loopback and uWS), and the durable minimum (durable-peer.ts: sha256, a journal append
 * flushed by group commit and a SQLite row, nothing else), what this machine allows a server that
 * keeps its promise of durability.
 */
function recordFloor(session: RealClientSession, seq: SmallRound[], par: SmallRound[], n: number, curl: string): void {
  const rounds = (xs: SmallRound[], of: (x: SmallRound) => number): string => `median of ${xs.length} (${xs.map((x) => fmt(of(x))).join(', ')}), each right after one of our rounds`;
  const floor = (x: SmallRound): number => x.floor;
  const durable = (x: SmallRound): number => x.durable;
  if (seq.length > 0) {
    session.figures.curlSeqFloorMs = median(seq.map(floor));
    session.figures.curlSeqDurableMs = median(seq.map(durable));
    session.ctx.record({ key: 'limits.curl_null_seq_64k', group: 'limits', label: `${n} × 64 KiB sequential, one curl process, to a server that stores nothing (uWS) [${curl}]`, value: session.figures.curlSeqFloorMs, unit: 'ms/object', detail: `the floor of the sequential row: curl, loopback and uWS alone; ${rounds(seq, floor)}` });
    session.ctx.record({ key: 'limits.curl_durable_seq_64k', group: 'limits', label: `${n} × 64 KiB sequential, one curl process, to the durable minimum (durable-peer.ts) [${curl}]`, value: session.figures.curlSeqDurableMs, unit: 'ms/object', detail: `sha256, journal append + fdatasync, the answer, then a SQLite row per object and nothing else; ${rounds(seq, durable)}` });
  }
  if (par.length > 0) {
    session.figures.curlParFloorPerSec = median(par.map(floor));
    session.figures.curlParDurablePerSec = median(par.map(durable));
    session.ctx.record({ key: 'limits.curl_null_par_64k', group: 'limits', label: `${n} × 64 KiB, 8 curl processes, to a server that stores nothing (uWS) [${curl}]`, value: session.figures.curlParFloorPerSec, unit: 'objects/s', detail: `the ceiling of the parallel row: curl, loopback and uWS alone; ${rounds(par, floor)}` });
    session.ctx.record({ key: 'limits.curl_durable_par_64k', group: 'limits', label: `${n} × 64 KiB, 8 curl processes, to the durable minimum (durable-peer.ts) [${curl}]`, value: session.figures.curlParDurablePerSec, unit: 'objects/s', detail: `sha256, journal append + group-committed fdatasync, the answers, then SQLite rows per turn and nothing else; ${rounds(par, durable)}` });
  }
}

/** The small-object rows: sequential through one curl process, and 8 curl processes in parallel. */
export async function benchCurlSmall(session: RealClientSession, only: (name: string) => boolean): Promise<void> {
  const ctx = session.ctx;
  const n = ctx.quick ? 200 : 1000;
  const curl = `curl ${session.figures.curlVersion ?? ''}`.trim();
  const probe = await expectProbe(session);
  ctx.note(probe);
  const seq: SmallRound[] = [];
  const par: SmallRound[] = [];
  const warm: { seq: SmallRound[]; par: SmallRound[] } = { seq: [], par: [] };
  const floorPeer = await startPeer('null-peer.js');
  const durablePeer = await startPeer('durable-peer.js', [join(ctx.scratch, 'durable-peer')]).catch((e: unknown) => {
    floorPeer.stop();
    throw e;
  });
  const peers = { floor: floorPeer.port, durable: durablePeer.port };
  let growth: number;
  try {
    ({ growth } = await session.section(async () => {
      // Warm-up rounds first, left out of the medians (warmUpRounds); their figures are in the rows' details.
      for (let w = 0; w < warmUpRounds(ctx); w++) {
        if (only('curl-seq64k')) warm.seq.push(await seqRound(session, `warm-up-${w}`, n, peers));
        if (only('curl-par64k')) warm.par.push(await parRound(session, `warm-up-${w}`, n, peers));
      }
      for (let r = 0; r < clientRounds(ctx); r++) {
        // Taking turns, and in the other order on odd rounds, so neither always follows the other.
        const order = r % 2 === 0 ? ['seq', 'par'] : ['par', 'seq'];
        for (const kind of order) {
          if (kind === 'seq' && only('curl-seq64k')) seq.push(await seqRound(session, r, n, peers));
          if (kind === 'par' && only('curl-par64k')) par.push(await parRound(session, r, n, peers));
        }
      }
    }));
  } finally {
    floorPeer.stop();
    durablePeer.stop();
  }
  recordFloor(session, seq, par, n, curl);
  session.figures.movedBytes += (seq.length + par.length + warm.seq.length + warm.par.length) * n * 65536;
  const per = { name: '1000 objects', units: n / 1000 };
  if (seq.length > 0) session.figures.curlSeqMs = session.recordRow('real.curl_seq_64k', `${n} × 64 KiB sequential, one curl process (keep-alive; batch per 100 through undici, timed and added)`, curl, 'ms/object', seq, per, growth, `${smallDetail(seq, n, warm.seq, 'ms/object')}; ${probe}`);
  if (par.length > 0) session.figures.curlParPerSec = session.recordRow('real.curl_par_64k', `${n} × 64 KiB, 8 curl processes in parallel (${n / 8} each; batches timed and added)`, curl, 'objects/s', par, per, growth, smallDetail(par, n, warm.par, 'objects/s'));
}

/** The large object every download row reads: the last curl upload's, or one uploaded for them. */
interface BigObject {
  readonly oid: string;
  readonly size: number;
  readonly file: string;
}

/**
 * A 1 GiB source file for curl -T, kept in memory too so each round can change its first bytes and
 * take the new oid without writing the whole file again (the server keeps every object it gets).
 */
export class BigSource {
  readonly path: string;
  readonly #data: Buffer;

  constructor(ctx: BenchContext, size: number, name = 'curl-big') {
    this.path = join(ctx.scratch, `${name}.bin`);
    this.#data = new SeededBytes(name).bytes(size);
    writeFileSync(this.path, this.#data);
    const fd = openSync(this.path, 'r+');
    fdatasyncSync(fd);
    closeSync(fd);
  }

  /**
   * Makes the file a new object (its first 8 bytes = `round`) and returns its oid, synced to disk,
   * and the CPU seconds its sha256 took here (node:crypto, as the server hashes an upload).
   */
  round(round: number): { oid: string; size: number; hashCpuS: number } {
    this.#data.writeDoubleBE(round, 0);
    const fd = openSync(this.path, 'r+');
    try {
      writeSync(fd, this.#data, 0, 8, 0);
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
    const cpu0 = process.cpuUsage();
    const { oid } = memObject(this.#data);
    const cpu = process.cpuUsage(cpu0);
    return { oid, size: this.#data.length, hashCpuS: (cpu.user + cpu.system) / 1e6 };
  }
}

/** batch (undici) + curl -T of the source file; the server must not hold the object yet. */
export async function uploadBig(client: LfsClient, oid: string, size: number, file: string): Promise<ClientRun> {
  const t0 = performance.now();
  const [entry] = await client.batch('upload', [{ oid, size }]);
  if (entry?.actions?.upload === undefined) throw new Error(`server already holds ${oid}: the upload would not be measured`);
  const batchMs = performance.now() - t0;
  const run = await curlPut(file, entry.actions.upload);
  return { ...run, ms: run.ms + batchMs };
}

/**
 * 1 GiB durable uploads through curl, each beside `dd conv=fdatasync` of the same size (before it on
 * even rounds, after it on odd ones; the dd is the faster of two back to back, see ddBeside), and
 * the most this machine's cores allow (see recordUploadCeiling). After each round also a `dd
 * oflag=direct`: what the disk takes at that moment through the path large uploads use (1 MiB
 * `O_DIRECT` writes, StagingFile), which on this VM can be well below the page cache's `dd`.
 */
export async function benchCurlUpload(session: RealClientSession): Promise<BigObject> {
  const ctx = session.ctx;
  const size = ctx.quick ? 128 * MiB : GiB;
  const src = new BigSource(ctx, size);
  const rounds: ClientRound[] = [];
  const dds: number[] = [];
  const directs: number[] = [];
  const ceilings: UploadCeiling[] = [];
  let last = { oid: '', size };
  const nullPeer = await startPeer('null-peer.js');
  let growth: number;
  try {
    ({ growth } = await session.section(async () => {
      for (let r = 0; r < clientRounds(ctx); r++) {
        const obj = src.round(r);
        const before = r % 2 === 0 ? await ddBesideBusy(ctx, size / MiB) : null;
        let oursBusyS = 0;
        rounds.push(
          await session.round(async () => {
            const busy0 = machineBusySeconds();
            const run = await uploadBig(session.s.client, obj.oid, obj.size, src.path);
            oursBusyS = machineBusySeconds() - busy0;
            return run;
          }, (ms) => mbps(size, ms)),
        );
        const dd = before ?? (await ddBesideBusy(ctx, size / MiB));
        dds.push(dd.rate);
        directs.push((await ddBesideBusy(ctx, size / MiB, true)).rate);
        // The same curl command into a server that stores nothing: what curl, loopback and uWS cost.
        const busy0 = machineBusySeconds();
        const floor = await curlPut(src.path, { href: `http://127.0.0.1:${nullPeer.port}/null`, header: { 'Transfer-Encoding': 'chunked' } });
        ceilings.push({ size, nullBusyS: machineBusySeconds() - busy0, nullRate: mbps(size, floor.ms), ddBusyS: dd.busyS, hashCpuS: obj.hashCpuS, ddRate: dd.rate, oursBusyS });
        last = obj;
      }
    }));
  } finally {
    nullPeer.stop();
  }
  session.figures.movedBytes += rounds.length * size;
  const pairs = rounds.map((r, i) => `${fmt(r.value)}/${fmt(dds[i]!)}`).join(', ');
  const ratio = median(rounds.map((r, i) => r.value / dds[i]!));
  const directPairs = rounds.map((r, i) => `${fmt(r.value)}/${fmt(directs[i]!)}`).join(', ');
  const directRatio = median(rounds.map((r, i) => r.value / directs[i]!));
  const detail = `beside dd (upload/dd MB/s): ${pairs}; median ratio ${(ratio * 100).toFixed(0)}%; after each, dd oflag=direct (upload/dd MB/s): ${directPairs}; median ratio ${(directRatio * 100).toFixed(0)}%`;
  const rate = session.recordRow('real.curl_upload_1g', `durable upload of ${size / MiB} MiB: batch + curl -T (chunked, as the action asks)`, `curl ${session.figures.curlVersion ?? ''}`.trim(), 'MB/s', rounds, { name: 'GiB', units: size / GiB }, growth, detail);
  const ceilingRatio = recordUploadCeiling(session, ceilings);
  session.figures.curlUpload = { ratio, pairs, rate, ms: median(rounds.map((r) => r.ms)), ceilingRatio, directRatio };
  return { ...last, file: src.path };
}

/** One round's figures for the upload's ceiling: machine-wide busy CPU seconds and rates (MB/s). */
interface UploadCeiling {
  readonly size: number;
  /** curl -T of the file into the null peer: curl, loopback and uWS receiving. */
  readonly nullBusyS: number;
  readonly nullRate: number;
  /** The dd beside it: writing the bytes into the page cache and flushing them, writeback included. */
  readonly ddBusyS: number;
  readonly ddRate: number;
  /** sha256 of the bytes (node:crypto, one core). */
  readonly hashCpuS: number;
  /** Our upload, the same way. */
  readonly oursBusyS: number;
}

/**
 * The most a durable, verified upload through curl can reach on this machine, from CPU alone: it
 * must at least do what the null peer's upload did (curl reading and sending, loopback, receiving),
 * what dd did (the bytes into the page cache and onto the disk) and a sha256 of the bytes; with every
 * core busy all the time it takes (their CPU seconds) ÷ (cores). That time beside dd's says whether
 * "≥ 90% of dd" is within the machine's reach at all, and how far from it our figure is.
 */
function recordUploadCeiling(session: RealClientSession, rounds: UploadCeiling[]): number {
  const cores = availableParallelism();
  const ceiling = (c: UploadCeiling): number => mbps(c.size, ((c.nullBusyS + c.ddBusyS + c.hashCpuS) / cores) * 1000);
  const perGiB = (s: number, c: UploadCeiling): string => `${fmt((s * GiB) / c.size * 1000)}`;
  const ratio = median(rounds.map((c) => ceiling(c) / c.ddRate));
  session.ctx.record({
    key: 'limits.curl_upload_ceiling',
    group: 'limits',
    label: `the most a durable, verified curl upload can reach here from CPU alone (${cores} cores), ÷ dd beside it`,
    value: ratio * 100,
    unit: '% of dd',
    detail:
      `median of ${rounds.length} (${rounds.map((c) => `${fmt(ceiling(c))}/${fmt(c.ddRate)} MB/s`).join(', ')}); ` +
      `busy CPU ms per GiB, machine-wide: curl into a server that stores nothing ${rounds.map((c) => perGiB(c.nullBusyS, c)).join(', ')} (at ${rounds.map((c) => fmt(c.nullRate)).join(', ')} MB/s), ` +
      `dd ${rounds.map((c) => perGiB(c.ddBusyS, c)).join(', ')}, sha256 ${rounds.map((c) => perGiB(c.hashCpuS, c)).join(', ')}; ` +
      `our upload ${rounds.map((c) => perGiB(c.oursBusyS, c)).join(', ')}`,
  });
  return ratio;
}

/** Empties the page cache (root), or else drops the one file's pages (posix_fadvise DONTNEED through dd). */
function dropCache(file: string): string {
  spawnSync('sync');
  try {
    writeFileSync('/proc/sys/vm/drop_caches', '3');
    return 'echo 3 > /proc/sys/vm/drop_caches';
  } catch {
    spawnSync('dd', [`if=${file}`, 'iflag=nocache', 'count=0', 'status=none']);
    return 'dd iflag=nocache count=0 (posix_fadvise DONTNEED of the file)';
  }
}

/** Bytes of a file in the page cache (fincore), or NaN if fincore is missing. */
function cached(file: string): number {
  const r = spawnSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', file], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.trim()) : NaN;
}

/**
 * The 1 GiB object downloaded through curl into /dev/null: warm (its file in the page cache), each
 * warm download followed by the same curl from a server that sends the object from memory (the
 * null peer: uWS's `tryEnd` as the socket takes it, no file), the ceiling of the warm row; and
 * cold, each cold download beside a cold `dd iflag=direct` read of the object's own file.
 */
export async function benchCurlDownload(session: RealClientSession, only: (name: string) => boolean, big: BigObject | null): Promise<void> {
  const ctx = session.ctx;
  const size = ctx.quick ? 128 * MiB : GiB;
  if (big === null) {
    const src = new BigSource(ctx, size);
    const obj = src.round(1000);
    await uploadBig(session.s.client, obj.oid, obj.size, src.path);
    big = { ...obj, file: src.path };
  }
  rmSync(big.file, { force: true });
  const [entry] = await session.s.client.batch('download', [{ oid: big.oid, size: big.size }]);
  const href = entry!.actions!.download!.href;
  const stored = join(session.s.server.dataDir, 'objects', big.oid.slice(0, 2), big.oid.slice(2, 4), big.oid);
  const curl = `curl ${session.figures.curlVersion ?? ''}`.trim();
  const per = { name: 'GiB', units: size / GiB };
  const warm: ClientRound[] = [];
  const cold: ClientRound[] = [];
  const ddCold: number[] = [];
  const fromMemory: number[] = [];
  let dropped = '';
  const { growth } = await session.section(async () => {
    if (only('curl-download')) {
      await curlGet(href); // fills the page cache
      const resident = cached(stored);
      const memoryDir = join(ctx.scratch, 'download-from-memory');
      mkdirSync(memoryDir, { recursive: true });
      linkSync(stored, join(memoryDir, big.oid)); // the null peer reads it into memory at start
      const memoryPeer = await startPeer('null-peer.js', [memoryDir]);
      try {
        const memoryHref = `http://127.0.0.1:${memoryPeer.port}/null/objects/${big.oid}`;
        await curlGet(memoryHref); // as ours had one before its rounds
        for (let r = 0; r < clientRounds(ctx); r++) {
          warm.push(await session.round(() => curlGet(href), (ms) => mbps(size, ms)));
          fromMemory.push(mbps(size, (await curlGet(memoryHref)).ms));
        }
      } finally {
        memoryPeer.stop();
        rmSync(memoryDir, { recursive: true, force: true });
      }
      ctx.note(`curl warm download: ${fmt(resident / MiB)} MiB of the ${fmt(size / MiB)} MiB object file in the page cache before it (fincore)`);
      for (let r = 0; r < clientRounds(ctx); r++) {
        const ddRead = async (): Promise<void> => {
          dropped = dropCache(stored);
          const run = await runClient(['dd', `if=${stored}`, 'of=/dev/null', 'bs=1M', 'iflag=direct', 'status=none']);
          ddCold.push(mbps(size, run.ms));
        };
        if (r % 2 === 1) await ddRead();
        dropped = dropCache(stored);
        const resident0 = cached(stored);
        if (resident0 > 0) ctx.note(`cold download round ${r}: ${fmt(resident0 / MiB)} MiB still cached after dropping`);
        cold.push(await session.round(() => curlGet(href), (ms) => mbps(size, ms)));
        if (r % 2 === 0) await ddRead();
      }
    }
  });
  session.figures.movedBytes += (warm.length + cold.length) * size;
  if (warm.length > 0) {
    const memoryDetail = `the same curl right after each of ours from a server that sends the object from memory (null-peer.ts): ${fmt(median(fromMemory))} MB/s (${fromMemory.map((v) => fmt(v)).join(', ')})`;
    session.figures.curlWarmMBps = session.recordRow('real.curl_download_warm', `download of ${size / MiB} MiB, warm (object file in the page cache), curl -o /dev/null`, curl, 'MB/s', warm, per, growth, memoryDetail);
    session.figures.curlFromMemoryMBps = median(fromMemory);
  }
  if (cold.length > 0) {
    const pairs = cold.map((r, i) => `${fmt(r.value)}/${fmt(ddCold[i]!)}`).join(', ');
    const ratio = median(cold.map((r, i) => r.value / ddCold[i]!));
    session.recordRow('real.curl_download_cold', `download of ${size / MiB} MiB, cold, curl -o /dev/null`, curl, 'MB/s', cold, per, growth, `beside a cold dd if=OBJECT of=/dev/null bs=1M iflag=direct (curl/dd MB/s): ${pairs}; median ratio ${(ratio * 100).toFixed(0)}%; cache dropped with ${dropped}`);
    session.figures.curlCold = { ratio, pairs };
  }
}

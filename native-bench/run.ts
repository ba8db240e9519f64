/**
 * `npm run bench`: the raw limits of this machine, our server's figures, and each figure as a ratio
 * to its limit with PASS/MISS against the targets, in one run, as one table. The speed targets are
 * judged through the clients users have (curl, git-lfs: real-clients.bench.ts); the bench's own
 * clients (undici, a lean keep-alive client) stay as probes of the server's ceiling.
 *
 *   npm run bench                    full run (1 GiB / 5 GiB objects; a few minutes on 2 cores)
 *   npm run bench -- --quick         smaller sizes, for a smoke test
 *   npm run bench -- --only=upload,dd   just these measures (names: see NAMES below)
 *   npm run bench -- --only=curl-upload,curl-seq64k,curl-par64k,curl-download,git-push,git-clone
 *                                    the real-client rows only (2½–4 minutes on 2 cores)
 *   npm run bench -- --only=rss-clients   5 GiB through curl and git-lfs into a fresh server: the RSS target
 *   npm run bench -- --only=cluster  three nodes behind nginx vs one node (SQLite + disk, PostgreSQL + S3,
 *                                    SQLite + S3), through curl; only when asked by name
 *   npm run bench -- --data-dir=/mnt/disk   scratch dir on the disk you want measured (default: os tmpdir)
 *   npm run bench -- --profile       servers run under node --cpu-prof; profiles in native-bench/results/profiles/
 *                                    (summarize: node native-bench/dist/profile-summary.js FILE)
 *
 * Results: native-bench/results/latest.json and latest.md (machine description included).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchContext } from './lib/context.js';
import { MiB } from './lib/data-gen.js';
import { describeMachine } from './lib/machine-info.js';
import { fmt, renderMarkdown, writeResults, type BenchResults, type Comparison } from './lib/report.js';
import { benchBlake3, benchDd, benchDiskWrite, benchFsync, benchLoopback, benchSha256, benchZstd } from './limits.bench.js';
import { benchCurlDownload, benchCurlSmall, benchCurlUpload } from './curl.bench.js';
import { benchCluster, compareCluster, type ClusterFigures } from './cluster.bench.js';
import { benchGitLfs } from './git-push.bench.js';
import { fromProduct } from './lib/product.js';
import { RealClientSession, type RealClientFigures } from './lib/session.js';
import { startForge } from './lib/stowage.js';
import { compareRealClients } from './real-clients.bench.js';
import { benchTransferMemory, compareTransferMemory, type TransferMemoryFigures } from './transfer-memory.bench.js';
import { benchCompressed, benchRss, benchServer, type CompressedFigures, type PairedUploads, type RssFigures, type ServerFigures } from './server.bench.js';

/** Every measure --only accepts. */
const NAMES = ['sha256', 'blake3', 'zstd', 'disk', 'dd', 'fsync', 'loopback', 'curl-upload', 'curl-seq64k', 'curl-par64k', 'curl-download', 'git-push', 'git-clone', 'rss-clients', 'upload', 'download', 'range', 'seq64k', 'par64k', 'rss', 'compressed', 'cluster'] as const;

/** The measures through real clients (curl, git-lfs), which the speed targets are judged by. */
const REAL = ['curl-upload', 'curl-seq64k', 'curl-par64k', 'curl-download', 'git-push', 'git-clone'];

const here = dirname(fileURLToPath(import.meta.url));
/** native-bench/dist → native-bench/results in the source tree. */
const RESULTS = resolve(here, '../results');

function parseArgs(argv: string[]): { quick: boolean; only: string[] | null; dataDir: string; profile: boolean } {
  let quick = false;
  let profile = false;
  let only: string[] | null = null;
  let dataDir = tmpdir();
  for (const a of argv) {
    if (a === '--quick') quick = true;
    else if (a === '--profile') profile = true;
    else if (a.startsWith('--only=')) only = a.slice(7).split(',').filter(Boolean);
    else if (a.startsWith('--data-dir=')) dataDir = resolve(a.slice(11));
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`usage: npm run bench -- [--quick] [--only=${NAMES.join(',')}] [--data-dir=DIR] [--profile]\n`);
      process.exit(0);
    } else throw new Error(`unknown argument ${a}`);
  }
  for (const n of only ?? []) if (!(NAMES as readonly string[]).includes(n)) throw new Error(`--only: unknown measure "${n}"; known: ${NAMES.join(', ')}`);
  return { quick, only, dataDir, profile };
}

/** Does the built server know SVC_COMPRESSION? Only then is the compressed run meaningful. */
async function serverSupportsCompression(): Promise<boolean> {
  const schema = await fromProduct<{ DEFAULTS?: Record<string, unknown> }>('src/config/schema.js');
  return schema.DEFAULTS !== undefined && 'SVC_COMPRESSION' in schema.DEFAULTS;
}

const pct = (x: number): string => `${(x * 100).toFixed(0)}%`;

/** The target column of a row measured with the bench's own clients: a probe, not the judge. */
const PROBE = 'ceiling probe (target judged through curl)';
const UNDICI = 'undici (ceiling probe)';
const LEAN = 'lean keep-alive (ceiling probe)';

/**
 * An upload target judged by the median of per-try ratios to a dd run beside each try (pairUp). A
 * `probe` row (the bench's own clients) shows the server's ceiling; its target is judged through curl.
 */
function pairedRow(label: string, client: string, p: PairedUploads, share: number, probe = false): Comparison {
  return {
    label,
    client,
    ours: `${fmt(p.rate)} MB/s (median)`,
    limit: `dd ${fmt(p.dd)} MB/s (median)`,
    ratio: `${pct(p.ratio)} of dd (median of pairs)`,
    ratioValue: p.ratio,
    target: probe ? PROBE : `≥ ${pct(share)} of dd`,
    pass: probe ? null : p.ratio >= share,
  };
}

/** Sets each of our figures against its limit and target. */
function compare(l: Limits, s: ServerFigures, rss: RssFigures | null, z: CompressedFigures | null, zr: RssFigures | null, quick: boolean): Comparison[] {
  const out: Comparison[] = [];
  const mb = (x: number): string => `${fmt(x)} MB/s`;
  if (s.upload1g !== undefined) {
    if (s.upload1gPaired !== undefined) out.push(pairedRow('durable upload 1 GiB vs dd conv=fdatasync beside it', UNDICI, s.upload1gPaired, 0.9, true));
    if (s.upload1gLeanPaired !== undefined) out.push(pairedRow('durable upload 1 GiB vs dd conv=fdatasync beside it', LEAN, s.upload1gLeanPaired, 0.9, true));
    if (l.dd !== undefined) out.push({ label: 'best durable upload 1 GiB vs best dd of the limits above', client: UNDICI, ours: mb(s.upload1g), limit: `dd ${mb(l.dd)}`, ratio: `${pct(s.upload1g / l.dd)} of dd`, ratioValue: s.upload1g / l.dd, target: '—', pass: null });
    if (l.disk !== undefined) out.push({ label: 'durable upload 1 GiB vs node write + fdatasync', client: UNDICI, ours: mb(s.upload1g), limit: mb(l.disk), ratio: pct(s.upload1g / l.disk), ratioValue: s.upload1g / l.disk, target: '—', pass: null });
    if (l.sha256 !== undefined) out.push({ label: 'durable upload 1 GiB vs sha256 rate (one core)', client: UNDICI, ours: mb(s.upload1g), limit: mb(l.sha256), ratio: pct(s.upload1g / l.sha256), ratioValue: s.upload1g / l.sha256, target: '—', pass: null });
  }
  if (l.sha256 !== undefined && l.dd !== undefined) {
    // One object's sha256 is sequential: whatever the pipeline, one upload cannot outrun it.
    out.push({ label: 'ceiling: sha256 on one core vs dd (bounds any single upload)', ours: mb(l.sha256), limit: `dd ${mb(l.dd)}`, ratio: `${pct(l.sha256 / l.dd)} of dd`, ratioValue: l.sha256 / l.dd, target: '≥ 90% needed for the upload target', pass: l.sha256 >= 0.9 * l.dd });
  }
  if (s.download1g !== undefined) {
    const lim = l.loopbackReceive !== undefined ? `loopback receive ${mb(l.loopbackReceive)}${l.loopbackSend !== undefined ? `, send ${mb(l.loopbackSend)}` : ''}` : '—';
    out.push({ label: 'download 1 GiB vs loopback', client: UNDICI, ours: mb(s.download1g), limit: lim, ratio: l.loopbackReceive !== undefined ? `${pct(s.download1g / l.loopbackReceive)} of receive` : '—', ratioValue: l.loopbackReceive !== undefined ? s.download1g / l.loopbackReceive : null, target: PROBE, pass: null });
    if (s.download1gRaw !== undefined) {
      const bare = l.loopbackSendBare;
      out.push({ label: 'download 1 GiB vs node:http → bare socket', client: 'bare socket (ceiling probe)', ours: mb(s.download1gRaw), limit: bare !== undefined ? mb(bare) : '—', ratio: bare !== undefined ? pct(s.download1gRaw / bare) : '—', ratioValue: bare !== undefined ? s.download1gRaw / bare : null, target: PROBE, pass: null });
    }
  }
  const floor = l.durableFloorMs;
  if (floor !== undefined) {
    out.push({ label: 'ceiling: one file per 64 KiB object (fsync file, rename, fsync dir)', ours: `${fmt(floor)} ms`, limit: '—', ratio: '—', ratioValue: null, target: '≤ 0.8 ms needed', pass: floor <= 0.8 });
  }
  if (l.appendMs !== undefined) {
    out.push({ label: 'ceiling: 64 KiB appended to a pack file + fdatasync', ours: `${fmt(l.appendMs)} ms`, limit: '—', ratio: '—', ratioValue: null, target: '≤ 0.8 ms needed', pass: l.appendMs <= 0.8 });
  }
  if (l.prewrittenMs !== undefined) {
    out.push({ label: 'ceiling: 64 KiB into a prepared (zeroed, synced) segment + fdatasync', ours: `${fmt(l.prewrittenMs)} ms`, limit: '—', ratio: '—', ratioValue: null, target: '≤ 0.8 ms needed', pass: l.prewrittenMs <= 0.8 });
  }
  const seqRow = (label: string, client: string, ms: number): Comparison => ({ label, client, ours: `${fmt(ms)} ms/object`, limit: floor !== undefined ? `durable floor ${fmt(floor)} ms` : '—', ratio: floor !== undefined ? `floor is ${pct(floor / ms)} of ours` : '—', ratioValue: floor !== undefined ? floor / ms : null, target: PROBE, pass: null });
  if (s.seqMsPerObject !== undefined) out.push(seqRow('64 KiB objects sequential (git-lfs pattern)', UNDICI, s.seqMsPerObject));
  if (s.seqMsPerObjectLean !== undefined) out.push(seqRow('64 KiB objects sequential (git-lfs pattern)', LEAN, s.seqMsPerObjectLean));
  if (s.seqMsPerObjectOwnBatch !== undefined) {
    out.push({ label: '64 KiB objects sequential, one batch each (stricter)', client: UNDICI, ours: `${fmt(s.seqMsPerObjectOwnBatch)} ms/object`, limit: floor !== undefined ? `durable floor ${fmt(floor)} ms` : '—', ratio: floor !== undefined ? `floor is ${pct(floor / s.seqMsPerObjectOwnBatch)} of ours` : '—', ratioValue: floor !== undefined ? floor / s.seqMsPerObjectOwnBatch : null, target: PROBE, pass: null });
  }
  const parRow = (label: string, client: string, perSec: number): Comparison => {
    const lim = l.durableParallelPerSec;
    return { label, client, ours: `${fmt(perSec)} objects/s`, limit: lim !== undefined ? `${fmt(lim)} durable files/s, 8 writers` : '—', ratio: lim !== undefined ? pct(perSec / lim) : '—', ratioValue: lim !== undefined ? perSec / lim : null, target: PROBE, pass: null };
  };
  if (s.parObjectsPerSec !== undefined) out.push(parRow('64 KiB objects, 8 parallel uploaders', UNDICI, s.parObjectsPerSec));
  if (s.parObjectsPerSecLean !== undefined) out.push(parRow('64 KiB objects, 8 parallel uploaders', LEAN, s.parObjectsPerSecLean));
  const moved = quick ? '1.1 GB' : '5 GiB';
  if (rss !== null) {
    out.push({ label: `server RSS growth while ${moved} move (up, down, slow reader)`, client: 'undici', ours: `${fmt(rss.peak / MiB)} MiB`, limit: '16 MiB budget', ratio: `${pct(rss.peak / (16 * MiB))} of budget`, ratioValue: rss.peak / (16 * MiB), target: '≤ 16 MiB', pass: rss.peak <= 16 * MiB });
    out.push({ label: `Range read, last MiB of a ${moved} raw object`, client: 'undici', ours: `${fmt(rss.range5gMs)} ms`, limit: '—', ratio: '—', ratioValue: null, target: '< 50 ms (set for compressed)', pass: null });
  }
  if (s.range1gMs !== undefined && rss === null) {
    out.push({ label: 'Range read, last MiB of a 1 GiB raw object', client: 'undici', ours: `${fmt(s.range1gMs)} ms`, limit: '—', ratio: '—', ratioValue: null, target: '< 50 ms (set for compressed)', pass: null });
  }
  if (z !== null) {
    if (z.uploadIncompressiblePaired !== undefined) out.push(pairedRow('[zstd:3] durable upload 1 GiB incompressible vs dd beside it', 'undici', z.uploadIncompressiblePaired, 0.7));
    if (z.uploadIncompressibleLeanPaired !== undefined) out.push(pairedRow('[zstd:3] durable upload 1 GiB incompressible vs dd beside it', 'lean keep-alive', z.uploadIncompressibleLeanPaired, 0.7));
    if (z.downloadText !== undefined) out.push({ label: '[zstd:3] download 1 GiB text-like', client: 'bare socket', ours: mb(z.downloadText), limit: l.zstd3TextDecompress !== undefined ? `zstd-3 decompress ${mb(l.zstd3TextDecompress)}` : '—', ratio: l.zstd3TextDecompress !== undefined ? pct(z.downloadText / l.zstd3TextDecompress) : '—', ratioValue: l.zstd3TextDecompress !== undefined ? z.downloadText / l.zstd3TextDecompress : null, target: '≥ 800 MB/s', pass: z.downloadText >= 800 });
    if (z.range5gMs !== undefined) out.push({ label: `[zstd:3] Range read, last MiB of a ${moved} compressed object`, client: 'undici', ours: `${fmt(z.range5gMs)} ms`, limit: '—', ratio: '—', ratioValue: null, target: '< 50 ms', pass: z.range5gMs < 50 });
  }
  if (zr !== null) out.push({ label: `[zstd:3] server RSS growth while ${moved} move`, client: 'undici', ours: `${fmt(zr.peak / MiB)} MiB`, limit: '16 MiB budget', ratio: `${pct(zr.peak / (16 * MiB))} of budget`, ratioValue: zr.peak / (16 * MiB), target: '≤ 16 MiB', pass: zr.peak <= 16 * MiB });
  return out;
}

interface Limits {
  sha256?: number;
  blake3?: number;
  disk?: number;
  dd?: number;
  fsyncMs?: number;
  durableFloorMs?: number;
  durableParallelPerSec?: number;
  appendMs?: number;
  prewrittenMs?: number;
  loopbackReceive?: number;
  loopbackSend?: number;
  loopbackSendBare?: number;
  zstd3TextDecompress?: number;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const only = (name: string): boolean => args.only === null || args.only.includes(name);
  const scratch = mkdtempSync(join(args.dataDir, 'stowage-bench-'));
  const started = performance.now();
  const results: BenchResults = { machine: describeMachine(scratch), mode: args.quick ? 'quick' : 'full', only: args.only, measurements: [], comparisons: [], notes: [], durationSeconds: 0 };
  const ctx: BenchContext = {
    quick: args.quick,
    scratch,
    profileDir: args.profile ? join(RESULTS, 'profiles') : null,
    record(m) {
      results.measurements.push(m);
      process.stderr.write(`  ${m.label}: ${fmt(m.value)} ${m.unit}${m.detail ? `  (${m.detail})` : ''}\n`);
    },
    note(text) {
      results.notes.push(text);
    },
  };
  // Temp data (multi-GB objects, the scratch files) goes whatever happens, even on Ctrl-C.
  const cleanup = (): void => rmSync(scratch, { recursive: true, force: true });
  process.once('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  const step = (name: string): void => {
    process.stderr.write(`[${((performance.now() - started) / 1000).toFixed(0)}s] ${name}\n`);
  };
  const l: Limits = {};
  let server: ServerFigures = {};
  let rss: RssFigures | null = null;
  let z: CompressedFigures | null = null;
  let zr: RssFigures | null = null;
  let real: RealClientFigures | null = null;
  let transferMemory: TransferMemoryFigures | null = null;
  let cluster: ClusterFigures | null = null;
  /** Runs one section; a failure is recorded and reported, and the run goes on with the next one. */
  const section = async <T>(name: string, fn: () => T | Promise<T>): Promise<T | undefined> => {
    step(name);
    try {
      return await fn();
    } catch (e) {
      const msg = `${name} FAILED: ${(e as Error)?.message ?? String(e)}`;
      process.stderr.write(`  ${msg}\n`);
      results.notes.push(msg);
      return undefined;
    }
  };
  try {
    if (only('sha256')) l.sha256 = await section('sha256', () => benchSha256(ctx));
    if (only('blake3')) l.blake3 = await section('blake3', () => benchBlake3(ctx));
    if (only('zstd')) {
      await section('zstd', () => benchZstd(ctx));
      l.zstd3TextDecompress = results.measurements.find((m) => m.key === 'limits.zstd3.text-like.decompress')?.value;
    }
    if (only('disk')) l.disk = await section('disk write + fdatasync', () => benchDiskWrite(ctx));
    if (only('dd')) l.dd = (await section('dd', () => benchDd(ctx))) ?? undefined;
    if (only('fsync')) {
      const f = await section('fsync 64 KiB', () => benchFsync(ctx));
      l.fsyncMs = f?.fsyncMs;
      l.durableFloorMs = f?.floorMs;
      l.durableParallelPerSec = f?.parallelPerSec;
      l.appendMs = f?.appendMs;
      l.prewrittenMs = f?.prewrittenMs;
    }
    if (only('loopback')) {
      const lb = await section('loopback', () => benchLoopback(ctx));
      l.loopbackReceive = lb?.receive;
      l.loopbackSend = lb?.send;
      l.loopbackSendBare = lb?.sendBare;
    }
    const forge = await startForge();
    try {
      if (REAL.some(only)) {
        const session = await section('real clients: server start, idle RSS', () => RealClientSession.start(ctx, forge));
        if (session !== undefined) {
          real = session.figures;
          let failed: unknown;
          try {
            const big = only('curl-upload') ? ((await section('curl: 1 GiB durable upload beside dd', () => benchCurlUpload(session))) ?? null) : null;
            if (only('curl-seq64k') || only('curl-par64k')) await section('curl: 64 KiB objects, one process / 8 processes', () => benchCurlSmall(session, only));
            if (only('curl-download')) await section('curl: 1 GiB download warm and cold', () => benchCurlDownload(session, only, big));
            if (only('git-push') || only('git-clone')) await section('git-lfs: git push / git clone', () => benchGitLfs(session, only));
          } catch (e) {
            failed = e;
            throw e;
          } finally {
            await session.stop(failed);
          }
        }
      }
      if (only('rss-clients')) transferMemory = (await section(`real clients: ${args.quick ? '640 MiB' : '5 GiB'} up and down through curl and git-lfs, server RSS`, () => benchTransferMemory(ctx, forge))) ?? null;
      if (['upload', 'download', 'range', 'seq64k', 'par64k'].some(only)) {
        server = (await section('server: upload/download/range/64 KiB', () => benchServer(ctx, forge, only, (f) => (server = f)))) ?? server;
      }
      // Only when named: it needs PostgreSQL's binaries and runs four setups side by side.
      if (args.only?.includes('cluster')) cluster = (await section('cluster: 3 nodes behind nginx vs 1 node, 64 KiB × 8 curls and 1 GiB', () => benchCluster(ctx, forge))) ?? null;
      if (only('rss')) rss = (await section(`server: ${args.quick ? '1.1 GB' : '5 GiB'} object, RSS`, () => benchRss(ctx, forge))) ?? null;
      if (only('compressed')) {
        if (await serverSupportsCompression()) {
          z = (await section('server: zstd:3 store', () => benchCompressed(ctx, forge, (f) => (z = f)))) ?? z;
          const zrss = results.measurements.find((m) => m.key === 'server.rss_zstd3');
          zr = zrss ? ({ peak: zrss.value * MiB } as RssFigures) : null;
        } else {
          ctx.note('Compressed-store targets not measured: the built server has no SVC_COMPRESSION yet.');
        }
      }
    } finally {
      await forge.stop();
    }
  } finally {
    cleanup();
  }
  if (real !== null) results.comparisons.push(...compareRealClients(real, args.quick));
  if (transferMemory !== null) results.comparisons.push(compareTransferMemory(transferMemory));
  if (cluster !== null) results.comparisons.push(...compareCluster(cluster));
  results.comparisons.push(...compare(l, server, rss, z, zr, args.quick));
  if (l.sha256 !== undefined && l.blake3 !== undefined) results.notes.push(`BLAKE3 runs at ${fmt(l.blake3 / l.sha256)}× the speed of node:crypto sha256 on this CPU.`);
  results.notes.push('Rates are MB/s with MB = 10^6 bytes. Clients (curl, git-lfs, undici), server and forge emulator share this machine\'s cores; "load average" above shows what else ran.');
  results.machine.loadAtEnd = loadavg().map((x) => Math.round(x * 100) / 100);
  results.durationSeconds = (performance.now() - started) / 1000;
  const md = renderMarkdown(results);
  process.stdout.write(`\n${md}\n`);
  const suffix = args.quick || args.only ? `-${args.quick ? 'quick' : 'partial'}` : '';
  writeResults(results, join(RESULTS, `latest${suffix}.json`), join(RESULTS, `latest${suffix}.md`));
  process.stderr.write(`results written to ${join(RESULTS, `latest${suffix}.{json,md}`)}\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`bench failed: ${(e as Error)?.stack ?? String(e)}\n`);
  process.exit(1);
});

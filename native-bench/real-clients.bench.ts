/**
 * The server as its users see it: transfers driven by curl and by the real git-lfs client against
 * one server started for them, with what the server alone spent (CPU from /proc/PID/stat, so the
 * clients' CPU on the shared cores is out of the figure), its idle RSS and its peak growth while the
 * transfers run. The sections live in curl.bench.ts and git-push.bench.ts; this module holds the
 * session they share, the bookkeeping of their rounds, and their rows of the comparison table.
 */
import { spawnSync } from 'node:child_process';
import type { GitHubEmulator } from '../test/helpers/forge-emulator.js';
import { GiB, MiB, SeededBytes } from './lib/data-gen.js';
import { peakRssOver, rssOf, watchServer, type ServerSpan } from './lib/proc-stats.js';
import { fmt, type Comparison } from './lib/report.js';
import { percentile, type BenchContext } from './limits.bench.js';
import { median, memObject, startStowage, type Stowage } from './server.bench.js';
import type { TransferMemoryFigures } from './transfer-memory.bench.js';

/** One timed run of a real client, with the server's share of it. */
export interface ClientRound {
  /** The figure of this run in the row's unit (MB/s, ms/object, objects/s, ms). */
  readonly value: number;
  readonly ms: number;
  readonly span: ServerSpan;
  /** CPU of the client processes (bash `times` of their children), seconds. */
  readonly clientCpuS: number;
}

/** What the real-client rows add up to, for the comparisons. */
export interface RealClientFigures {
  curlVersion?: string;
  gitLfsVersion?: string;
  idleRssStart?: number;
  idleRssWarm?: number;
  idleRssAfter?: number;
  /** Peak RSS over the warm idle baseline, across every real-client section run. */
  rssGrowth?: number;
  /** The peak RSS itself (bytes), for the growth over the just-started idle RSS. */
  rssPeak?: number;
  movedBytes: number;
  /** directRatio: the upload ÷ a `dd oflag=direct` after it (the disk through the upload's own path). */
  curlUpload?: { ratio: number; pairs: string; ms: number; rate: number; ceilingRatio: number; directRatio: number };
  curlSeqMs?: number;
  curlParPerSec?: number;
  /** The same curl runs against a server that stores nothing (curl.bench.ts, null-peer.ts). */
  curlSeqFloorMs?: number;
  curlParFloorPerSec?: number;
  curlSeqDurableMs?: number;
  curlParDurablePerSec?: number;
  curlWarmMBps?: number;
  /** The same curl from a server that sends the object from memory (null-peer.ts): the warm row's ceiling. */
  curlFromMemoryMBps?: number;
  curlCold?: { ratio: number; pairs: string };
  gitPush1gMs?: number;
  gitPushSmallMs?: number;
  /**
   * floorCpuMsPerObject: the same clone from a server that stores nothing (null-peer.ts);
   * servingCpuMsPerObject: from the serving minimum, which reads each object's file (serving-peer.ts).
   */
  gitClone?: { ms: number; serverCpuMsPerObject: number; clientCpuS: number; serverCpuS: number; floorCpuMsPerObject: number; servingCpuMsPerObject: number };
  /** floorMs: the same clone from a server that stores nothing, streaming the object from memory. */
  gitClone1g?: { ms: number; serverCpuS: number; clientCpuS: number; floorMs: number };
}

/** The server every real-client section runs against, and the bookkeeping they share. */
export class RealClientSession {
  readonly s: Stowage;
  readonly ctx: BenchContext;
  readonly figures: RealClientFigures = { movedBytes: 0 };
  readonly #warmRss: number;

  private constructor(ctx: BenchContext, s: Stowage, warmRss: number) {
    this.ctx = ctx;
    this.s = s;
    this.#warmRss = warmRss;
  }

  /** Starts the server, measures its idle RSS fresh and after a warm-up, and notes the clients' versions. */
  static async start(ctx: BenchContext, forge: GitHubEmulator): Promise<RealClientSession> {
    const s = await startStowage(ctx, forge, 'real-clients');
    try {
      const start = await idleRss(s.pid);
      // Warm-up: the auth cache, the small-object path and JIT, as the first requests of a day do.
      const warm = new SeededBytes('real-warm').bytes(20 * 65536);
      for (let i = 0; i < 20; i++) {
        const o = memObject(warm.subarray(i * 65536, (i + 1) * 65536));
        await s.client.upload(o.oid, o.size, () => o.data);
      }
      const warmRss = await idleRss(s.pid);
      const session = new RealClientSession(ctx, s, warmRss);
      session.figures.idleRssStart = start;
      session.figures.idleRssWarm = warmRss;
      ({ curl: session.figures.curlVersion, lfs: session.figures.gitLfsVersion } = clientVersions());
      ctx.record({
        key: 'real.idle_rss',
        group: 'server',
        label: 'server RSS idle: just started / after 20 small uploads',
        value: start / MiB,
        unit: 'MiB',
        detail: `${fmt(start / MiB)} / ${fmt(warmRss / MiB)} MiB (VmRSS, median of 10 samples 50 ms apart, 1 s after the last request)`,
      });
      return session;
    } catch (e) {
      await s.stop(e);
      throw e;
    }
  }

  /**
   * Runs one section with the server's peak RSS watched over it; the growth over the warm idle
   * baseline goes into the section's detail and the session's figure.
   */
  async section<T>(run: () => Promise<T>): Promise<{ value: T; growth: number }> {
    const peak = peakRssOver(this.s.pid);
    let value: T;
    try {
      value = await run();
    } catch (e) {
      await peak.stop();
      throw e;
    }
    const top = await peak.stop();
    const growth = top - this.#warmRss;
    this.figures.rssGrowth = Math.max(this.figures.rssGrowth ?? -Infinity, growth);
    this.figures.rssPeak = Math.max(this.figures.rssPeak ?? 0, top);
    return { value, growth };
  }

  /** Times one client run and what the server spent meanwhile. */
  async round(run: () => Promise<{ ms: number; clientCpuS: number }>, value: (ms: number) => number): Promise<ClientRound> {
    const end = watchServer(this.s.pid);
    const r = await run();
    return { value: value(r.ms), ms: r.ms, span: end(), clientCpuS: r.clientCpuS };
  }

  /**
   * Records a row: the median of its rounds, each round's figure, the server's CPU per `per`
   * (a GiB or 1000 objects, `units` of them per round), the client's, the load and the RSS growth.
   */
  recordRow(key: string, label: string, client: string, unit: string, rounds: ClientRound[], per: { name: string; units: number }, growth: number, extra = ''): number {
    const value = median(rounds.map((r) => r.value));
    const cpuPer = (s: number): string => `${fmt((s * 1000) / per.units)} ms`;
    const loads = rounds.flatMap((r) => r.span.load);
    this.ctx.record({
      key,
      group: 'server',
      label: `${label} [${client}]`,
      value,
      unit,
      detail:
        `median of ${rounds.length} (${rounds.map((r) => fmt(r.value)).join(', ')}); ` +
        `server CPU per ${per.name} ${cpuPer(median(rounds.map((r) => r.span.serverCpuS)))} (${rounds.map((r) => cpuPer(r.span.serverCpuS)).join(', ')}), ` +
        `client CPU ${cpuPer(median(rounds.map((r) => r.clientCpuS)))}; ` +
        `load ${fmt(Math.min(...loads))}–${fmt(Math.max(...loads))} (start ${rounds.map((r) => fmt(r.span.load[0])).join('/')}, end ${rounds.map((r) => fmt(r.span.load[1])).join('/')}); ` +
        `server RSS peak over the section ${growth < 0 ? '−' : '+'}${fmt(Math.abs(growth) / MiB)} MiB over warm idle${extra ? `; ${extra}` : ''}`,
    });
    return value;
  }

  /** Records the idle RSS once the transfers are over (what the server keeps), then stops it. */
  async stop(failure?: unknown): Promise<void> {
    if (failure === undefined) {
      this.figures.idleRssAfter = await idleRss(this.s.pid);
      this.ctx.record({ key: 'real.idle_rss_after', group: 'server', label: 'server RSS idle after the real-client transfers', value: this.figures.idleRssAfter / MiB, unit: 'MiB', detail: `${fmt((this.figures.idleRssAfter - this.#warmRss) / MiB)} MiB over warm idle (VmRSS, as above)` });
    }
    await this.s.stop(failure);
  }
}

/** The versions of curl and git-lfs on this machine, as they print them (undefined where missing). */
export function clientVersions(): { curl: string | undefined; lfs: string | undefined } {
  return {
    curl: /^curl (\S+)/.exec(spawnSync('curl', ['--version'], { encoding: 'utf8' }).stdout ?? '')?.[1],
    lfs: /git-lfs\/(\S+)/.exec(spawnSync('git', ['lfs', 'version'], { encoding: 'utf8' }).stdout ?? '')?.[1],
  };
}

/** VmRSS of an idle process: the median of 10 samples 50 ms apart, after a 1 s lull. */
export async function idleRss(pid: number): Promise<number> {
  await new Promise((r) => setTimeout(r, 1000));
  const xs: number[] = [];
  for (let i = 0; i < 10; i++) {
    xs.push(rssOf(pid).rss);
    await new Promise((r) => setTimeout(r, 50));
  }
  return percentile(xs, 50);
}

const pct = (x: number): string => `${(x * 100).toFixed(0)}%`;

/** The rows the speed targets are judged by: curl and git-lfs only. */
export function compareRealClients(f: RealClientFigures, quick: boolean): Comparison[] {
  const out: Comparison[] = [];
  const curl = `curl ${f.curlVersion ?? '?'}`;
  const lfs = `git-lfs ${f.gitLfsVersion ?? '?'}`;
  const big = quick ? '128 MiB' : '1 GiB';
  if (f.curlUpload !== undefined) {
    const u = f.curlUpload;
    out.push({ label: `durable upload ${big} (batch + curl -T) vs dd conv=fdatasync beside it`, client: curl, ours: `${fmt(u.rate)} MB/s (median)`, limit: `dd beside each; this machine's CPU allows at most ${pct(u.ceilingRatio)} of it (limits.curl_upload_ceiling); the upload is ${pct(u.directRatio)} of a dd oflag=direct after it`, ratio: `${pct(u.ratio)} of dd (median of pairs: ${u.pairs})`, ratioValue: u.ratio, target: '≥ 90% of dd', pass: u.ratio >= 0.9 });
  }
  if (f.gitPush1gMs !== undefined && f.curlUpload !== undefined) {
    const r = f.gitPush1gMs / f.curlUpload.ms;
    out.push({ label: `git push of ${big} vs the curl upload's time`, client: lfs, ours: `${fmt(f.gitPush1gMs)} ms (median)`, limit: `curl ${fmt(f.curlUpload.ms)} ms (median)`, ratio: `${fmt(r)}× curl's time`, ratioValue: r, target: '≤ 1.2× curl', pass: r <= 1.2 });
  }
  if (f.curlSeqMs !== undefined) {
    const floor = f.curlSeqFloorMs;
    const durable = f.curlSeqDurableMs === undefined ? '' : `; ${fmt(f.curlSeqDurableMs)} ms to the durable minimum`;
    const limit = floor === undefined ? '—' : `${fmt(floor)} ms to a server that stores nothing${durable}`;
    const overDurable = f.curlSeqDurableMs === undefined ? '' : `, +${fmt(f.curlSeqMs - f.curlSeqDurableMs)} over the durable minimum`;
    const ratio = floor === undefined ? '—' : `+${fmt(f.curlSeqMs - floor)} ms per object over the floor${overDurable}`;
    out.push({ label: '64 KiB objects sequential, one curl process (keep-alive), batch per 100', client: curl, ours: `${fmt(f.curlSeqMs)} ms/object`, limit, ratio, ratioValue: floor === undefined ? null : f.curlSeqMs / floor, target: '≤ 0.8 ms', pass: f.curlSeqMs <= 0.8 });
  }
  if (f.curlParPerSec !== undefined) {
    const floor = f.curlParFloorPerSec;
    const durable = f.curlParDurablePerSec === undefined ? '' : `; ${fmt(f.curlParDurablePerSec)} objects/s to the durable minimum`;
    const limit = floor === undefined ? '—' : `${fmt(floor)} objects/s to a server that stores nothing${durable}`;
    const ofDurable = f.curlParDurablePerSec === undefined ? '' : `, ${pct(f.curlParPerSec / f.curlParDurablePerSec)} of the durable minimum`;
    const ratio = floor === undefined ? '—' : `${pct(f.curlParPerSec / floor)} of the floor${ofDurable}`;
    out.push({ label: '64 KiB objects, 8 curl processes in parallel', client: curl, ours: `${fmt(f.curlParPerSec)} objects/s`, limit, ratio, ratioValue: floor === undefined ? null : f.curlParPerSec / floor, target: '≥ 3,000 objects/s', pass: f.curlParPerSec >= 3000 });
  }
  if (f.gitClone1g !== undefined) {
    // No target of its own in the issue: shown with what tells whose time it is.
    const c = f.gitClone1g;
    out.push({ label: `git clone of a ${big} asset (smudge download and checkout)`, client: lfs, ours: `${fmt(c.ms)} ms (median)`, limit: `${fmt(c.floorMs)} ms from a server that stores nothing`, ratio: `${fmt(c.ms / c.floorMs)}× the floor's time; CPU in it: client ${fmt(c.clientCpuS * 1000)} ms, server ${fmt(c.serverCpuS * 1000)} ms`, ratioValue: c.ms / c.floorMs, target: '—', pass: null });
  }
  if (f.gitPushSmallMs !== undefined) out.push({ label: `git push of ${quick ? 200 : 1000} × 64 KiB files`, client: lfs, ours: `${fmt(f.gitPushSmallMs)} ms (median)`, limit: '—', ratio: '—', ratioValue: null, target: '—', pass: null });
  if (f.gitClone !== undefined) {
    const c = f.gitClone;
    out.push({ label: `git clone of ${quick ? 200 : 1000} × 64 KiB files: server CPU per object`, client: lfs, ours: `${fmt(c.serverCpuMsPerObject)} ms/object`, limit: `wall ${fmt(c.ms)} ms; CPU in it: client ${fmt(c.clientCpuS * 1000)} ms, server ${fmt(c.serverCpuS * 1000)} ms; a server that stores nothing: ${fmt(c.floorCpuMsPerObject)} ms/object; the serving minimum (files read per GET): ${fmt(c.servingCpuMsPerObject)} ms/object`, ratio: `server busy ${pct(c.serverCpuS / (c.ms / 1000))} of the wall time, client ${pct(c.clientCpuS / (c.ms / 1000))}`, ratioValue: null, target: '≤ 0.15 ms (and the client the limit)', pass: c.serverCpuMsPerObject <= 0.15 });
  }
  if (f.curlWarmMBps !== undefined) out.push({ label: `download ${big} warm (page cache), curl -o /dev/null`, client: curl, ours: `${fmt(f.curlWarmMBps)} MB/s (median)`, limit: f.curlFromMemoryMBps === undefined ? '—' : `a server sending from memory: ${fmt(f.curlFromMemoryMBps)} MB/s`, ratio: f.curlFromMemoryMBps === undefined ? '—' : `${pct(f.curlWarmMBps / f.curlFromMemoryMBps)} of it`, ratioValue: null, target: '≥ 2,000 MB/s', pass: f.curlWarmMBps >= 2000 });
  if (f.curlCold !== undefined) out.push({ label: `download ${big} cold vs a cold dd iflag=direct read of the same file`, client: curl, ours: `median of pairs: ${f.curlCold.pairs}`, limit: 'dd iflag=direct bs=1M beside each', ratio: `${pct(f.curlCold.ratio)} of dd`, ratioValue: f.curlCold.ratio, target: '≥ 90% of dd', pass: f.curlCold.ratio >= 0.9 });
  if (f.idleRssStart !== undefined) out.push({ label: 'server RSS idle, just started', client: '—', ours: `${fmt(f.idleRssStart / MiB)} MiB`, limit: `after 20 small uploads ${fmt((f.idleRssWarm ?? NaN) / MiB)} MiB; after the transfers ${f.idleRssAfter === undefined ? '—' : fmt(f.idleRssAfter / MiB)} MiB`, ratio: `${pct(f.idleRssStart / (60 * MiB))} of budget`, ratioValue: f.idleRssStart / (60 * MiB), target: '≤ 60 MiB', pass: f.idleRssStart <= 60 * MiB });
  if (f.rssGrowth !== undefined && f.rssPeak !== undefined && f.idleRssStart !== undefined) {
    // Not the target's scenario (see compareTransferMemory): these sections add bursts of a thousand
    // small objects, whose young-generation and pooled-buffer growth is reported here for what it is.
    const g = f.rssPeak - f.idleRssStart;
    out.push({ label: `server RSS peak over all the sections above (${fmt(f.movedBytes / GiB)} GiB, small-object bursts included)`, client: `${curl}, ${lfs}`, ours: `${signed(g)} over just-started idle (${signed(f.rssGrowth)} over warm idle)`, limit: '—', ratio: '—', ratioValue: null, target: '—', pass: null });
  }
  return out;
}

const signed = (x: number): string => `${x < 0 ? '−' : '+'}${fmt(Math.abs(x) / MiB)} MiB`;

/** The memory target, judged in its own scenario (transfer-memory.bench.ts): a fresh server, 5 GiB through curl and git-lfs. */
export function compareTransferMemory(m: TransferMemoryFigures): Comparison {
  const g = m.peak - m.start;
  return {
    label: `server RSS peak growth while ${fmt(m.moved / GiB)} GiB go up and down through curl and git-lfs (fresh server)`,
    client: m.clients,
    ours: `${signed(g)} over just-started idle (${fmt(m.start / MiB)} MiB)`,
    limit: '16 MiB budget',
    ratio: `${pct(g / (16 * MiB))} of budget`,
    ratioValue: g / (16 * MiB),
    target: '≤ 16 MiB',
    pass: g <= 16 * MiB,
  };
}

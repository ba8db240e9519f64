/**
 * The server every real-client section (curl.bench.ts, git-push.bench.ts) runs against, and the
 * bookkeeping of their rounds: what the server alone spent (CPU from /proc/PID/stat), its idle RSS
 * and its peak growth while the transfers run.
 */
import { spawnSync } from 'node:child_process';
import type { BenchContext } from './context.js';
import { MiB, SeededBytes } from './data-gen.js';
import { peakRssOver, rssOf, watchServer, type ServerSpan } from './proc-stats.js';
import type { GitHubEmulator } from './product.js';
import { fmt } from './report.js';
import { median, percentile } from './stats.js';
import { memObject, startStowage, type Stowage } from './stowage.js';

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

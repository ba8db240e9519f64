/**
 * The memory target's own scenario: "growth ≤ 16 MiB while 5 GiB go up and down through curl and
 * git-lfs". A server just started (no warm-up: whatever the first transfers load counts as growth),
 * then five 1 GiB transfers, the two clients taking turns: curl up, git push, curl down, git clone
 * (the smudge filter downloads), curl down again. The peak VmRSS over the whole run less the
 * just-started idle figure is what the target judges. The small-object bursts of the other
 * real-client sections are another scenario; their peak is reported there, beside this one.
 */
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { runClient } from './lib/client-run.js';
import type { BenchContext } from './lib/context.js';
import { BigSource, curlGet, uploadBig } from './lib/curl.js';
import { GiB, MiB, SeededBytes } from './lib/data-gen.js';
import { committedProject, push, stageObject } from './lib/git-lfs.js';
import { peakRssOver } from './lib/proc-stats.js';
import { GitSandbox, type GitHubEmulator } from './lib/product.js';
import { fmt, type Comparison } from './lib/report.js';
import { clientVersions, idleRss } from './lib/session.js';
import { startStowage, TOKEN } from './lib/stowage.js';

/** One transfer of the scenario: which client moved the object which way, and the peak it left. */
export interface TransferStep {
  readonly what: string;
  readonly ms: number;
  /** Peak VmRSS during the step, bytes. */
  readonly peak: number;
}

export interface TransferMemoryFigures {
  /** VmRSS of the server just started, before any request (the target's baseline), bytes. */
  readonly start: number;
  /** The highest peak of the steps, bytes. */
  readonly peak: number;
  /** VmRSS at rest after the last transfer, bytes. */
  readonly after: number;
  readonly moved: number;
  readonly steps: readonly TransferStep[];
  readonly clients: string;
}

/** Five transfers of `size` bytes through curl and git-lfs into and out of a fresh server. */
export async function benchTransferMemory(ctx: BenchContext, forge: GitHubEmulator): Promise<TransferMemoryFigures> {
  const found = clientVersions();
  const versions = { curl: `curl ${found.curl ?? '?'}`, lfs: `git-lfs ${found.lfs ?? '?'}` };
  const size = ctx.quick ? 128 * MiB : GiB;
  const root = join(ctx.scratch, 'transfer-memory');
  const s = await startStowage(ctx, forge, 'transfer-memory');
  let failed: unknown;
  try {
    // Made before the baseline is read: the bench's own memory is not the server's, but its CPU
    // (1 GiB generated) would otherwise run beside the first step.
    const src = new BigSource(ctx, size, 'memory-curl');
    const up = src.round(0);
    const sb = await GitSandbox.create(join(root, 'home'), s.server.url, TOKEN);
    let pushedOid = '';
    const project = await committedProject(sb, join(root, 'project'), s.server.url, async (work) => {
      pushedOid = await stageObject(work, 'asset.bin', new SeededBytes('memory-git').chunks(size));
    });
    const start = await idleRss(s.pid);

    const steps: TransferStep[] = [];
    const step = async (what: string, run: () => Promise<unknown>): Promise<void> => {
      const peak = peakRssOver(s.pid);
      const t0 = performance.now();
      try {
        await run();
      } finally {
        const top = await peak.stop();
        steps.push({ what, ms: performance.now() - t0, peak: top });
      }
    };
    const download = async (oid: string): Promise<void> => {
      const [entry] = await s.client.batch('download', [{ oid, size }]);
      const href = entry?.actions?.download?.href;
      if (href === undefined) throw new Error(`the server does not offer ${oid} for download`);
      await curlGet(href);
    };
    await step('curl up', () => uploadBig(s.client, up.oid, up.size, src.path));
    await step('git push', () => push(sb, project.work));
    await step('curl down (the curl upload)', () => download(up.oid));
    await step('git clone (smudge download)', async () => {
      const dest = join(root, 'clone');
      await runClient(['git', 'clone', '-q', project.remote, dest], { env: sb.env, cwd: root });
      // The file must be the object, not its pointer: the smudge filter fetched it.
      const got = statSync(join(dest, 'asset.bin')).size;
      rmSync(dest, { recursive: true, force: true });
      if (got !== size) throw new Error(`git clone left a ${got}-byte file where the ${size}-byte object belongs`);
    });
    await step('curl down (the pushed object)', () => download(pushedOid));
    const after = await idleRss(s.pid);
    const peak = Math.max(...steps.map((x) => x.peak));
    const moved = steps.length * size;
    const signed = (bytes: number): string => `${bytes < 0 ? '−' : '+'}${fmt(Math.abs(bytes) / MiB)}`;
    ctx.record({
      key: 'real.rss_transfers',
      group: 'server',
      label: `server RSS peak growth over just-started idle while ${fmt(moved / GiB)} GiB go up and down through curl and git-lfs (a fresh server, no warm-up) [${versions.curl}, ${versions.lfs}]`,
      value: (peak - start) / MiB,
      unit: 'MiB',
      detail:
        `just started ${fmt(start / MiB)} MiB (VmRSS, median of 10 samples); peak per transfer over it: ` +
        `${steps.map((x) => `${x.what} ${signed(x.peak - start)} MiB (${fmt((size / 1e6 / x.ms) * 1000)} MB/s)`).join(', ')}; ` +
        `idle 1 s after the last ${fmt(after / MiB)} MiB (50 ms VmRSS samples and VmHWM, as the other sections)`,
    });
    return { start, peak, after, moved, steps, clients: `${versions.curl}, ${versions.lfs}` };
  } catch (e) {
    failed = e;
    throw e;
  } finally {
    await s.stop(failed);
    rmSync(root, { recursive: true, force: true });
    rmSync(join(ctx.scratch, 'memory-curl.bin'), { force: true });
  }
}

const pct = (x: number): string => `${(x * 100).toFixed(0)}%`;
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

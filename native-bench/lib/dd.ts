/** `dd`, the yardstick of the upload targets, run by the limits and right beside uploads. */
import { spawn, spawnSync } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { BenchContext } from './context.js';
import { MiB } from './data-gen.js';
import { machineBusySeconds } from './proc-stats.js';
import { mbps } from './stats.js';

/** `dd if=/dev/zero of=path bs=1M count=… conv=fdatasync [oflag=direct]`'s arguments. */
export const ddArgs = (path: string, count: number, direct = false): string[] => ['if=/dev/zero', `of=${path}`, 'bs=1M', `count=${count}`, 'conv=fdatasync', ...(direct ? ['oflag=direct'] : [])];

/** One `dd … conv=fdatasync` of `count` MiB into `path`: its rate, what dd says, or why it failed. */
export function dd(path: string, count: number, direct = false): { rate: number; says: string; failed: string | null } {
  const t0 = performance.now();
  const r = spawnSync('dd', ddArgs(path, count, direct), { encoding: 'utf8' });
  const rate = mbps(count * MiB, performance.now() - t0);
  const says = (r.stderr.trim().split('\n').pop() ?? '').replace(/^.*copied, /, '');
  return { rate, says, failed: r.status === 0 ? null : r.stderr };
}

/**
 * The dd yardstick measured right beside an upload (see pairUp), so both see the same spell of a
 * shared machine: the faster of two dd runs of `count` MiB, each removed again. Two, because on this
 * VM a dd whose page cache must grow into guest memory not touched lately runs at a quarter of its
 * rate (see benchDdGrowing), and between uploads the bench's 1 GiB data buffers take the memory a
 * previous dd freed; the second dd reuses what the first freed, as the limit above does.
 */
export async function ddBeside(ctx: BenchContext, count: number): Promise<number> {
  return (await ddBesideBusy(ctx, count)).rate;
}

/**
 * ddBeside, with the machine's busy CPU seconds (machineBusySeconds) during the faster dd; with
 * `direct`, `oflag=direct` (the path a large upload takes, StagingFile) instead of the page cache.
 */
export async function ddBesideBusy(ctx: BenchContext, count: number, direct = false): Promise<{ rate: number; busyS: number }> {
  const path = join(ctx.scratch, 'dd-beside.bin');
  let best = { rate: 0, busyS: 0 };
  for (let i = 0; i < 2; i++) {
    // Not spawnSync: the bench's keep-alive connections must see the server's idle close meanwhile.
    const busy0 = machineBusySeconds();
    const t0 = performance.now();
    const child = spawn('dd', ddArgs(path, count, direct), { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve, reject) => child.on('error', reject).on('close', resolve));
    const rate = mbps(count * MiB, performance.now() - t0);
    const busyS = machineBusySeconds() - busy0;
    await rm(path, { force: true });
    if (code !== 0) throw new Error(`dd failed: ${stderr}`);
    if (rate > best.rate) best = { rate, busyS };
  }
  return best;
}

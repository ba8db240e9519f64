/**
 * The server as its users see it: transfers driven by curl and by the real git-lfs client against
 * one server started for them, with what the server alone spent (CPU from /proc/PID/stat, so the
 * clients' CPU on the shared cores is out of the figure), its idle RSS and its peak growth while the
 * transfers run. The sections live in curl.bench.ts and git-push.bench.ts, the session they share
 * in lib/session.ts; this module holds their rows of the comparison table.
 */
import { GiB, MiB } from './lib/data-gen.js';
import { fmt, type Comparison } from './lib/report.js';
import type { RealClientFigures } from './lib/session.js';

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

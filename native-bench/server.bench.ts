/**
 * Our server measured end to end: the real process (`startServer` spawns dist/src/main.js), the
 * GitHub emulator as its forge, and undici speaking the Git LFS protocol the way git-lfs does
 * (batch → PUT with the action's headers → verify). Every figure includes the protocol round trips.
 */
import { createHash } from 'node:crypto';
import { tries, type BenchContext } from './lib/context.js';
import { GiB, MiB, SeededBytes, textLike } from './lib/data-gen.js';
import { ddBeside } from './lib/dd.js';
import { KeepAliveConnection } from './lib/keepalive-client.js';
import { LfsClient, type BatchObject } from './lib/lfs-client.js';
import { cpuSecondsOf, mainThreadCpuSecondsOf, peakRssOver, rssOf } from './lib/proc-stats.js';
import type { GitHubEmulator } from './lib/product.js';
import { fmt } from './lib/report.js';
import { median, mbps, percentile } from './lib/stats.js';
import { journalRetired, memObject, startStowage, type MemObject } from './lib/stowage.js';

async function* slices(data: Buffer, chunk = MiB): AsyncGenerator<Buffer> {
  for (let at = 0; at < data.length; at += chunk) yield data.subarray(at, at + chunk);
}

async function* generated(gen: SeededBytes, size: number): AsyncGenerator<Buffer> {
  for (const c of gen.chunks(size)) yield c;
}

/** Server CPU (all threads and the event-loop thread) and this process's CPU over one measured span. */
function cpuMeter(pid: number): () => { server: number; loop: number; client: number } {
  const s0 = cpuSecondsOf(pid);
  const l0 = mainThreadCpuSecondsOf(pid);
  const c0 = process.cpuUsage();
  return () => {
    const c = process.cpuUsage(c0);
    return { server: cpuSecondsOf(pid) - s0, loop: mainThreadCpuSecondsOf(pid) - l0, client: (c.user + c.system) / 1e6 };
  };
}

/** "server CPU 1.2 ms/MiB (event loop 0.8), client 0.3": where a transfer's CPU went, per MiB moved. */
function cpuDetail(cpu: { server: number; loop: number; client: number }, bytes: number): string {
  const per = (s: number): string => fmt((s * 1000) / (bytes / MiB));
  return `CPU per MiB: server ${per(cpu.server)} ms (event loop ${per(cpu.loop)}), client ${per(cpu.client)} ms`;
}

interface Timed {
  batchMs: number;
  putMs: number;
  verifyMs: number;
  totalMs: number;
}

/**
 * One large upload, timed phase by phase: batch, PUT (streamed), verify. With `leanData`, the PUT
 * (chunked, 1 MiB chunks) and the verify go over a bare keep-alive connection instead of undici
 * (see KeepAliveConnection): the server's rate without undici's CPU on the shared cores.
 */
async function timedUpload(client: LfsClient, oid: string, size: number, body: () => AsyncIterable<Buffer>, leanData: Buffer | null = null): Promise<Timed> {
  const t0 = performance.now();
  const [entry] = await client.batch('upload', [{ oid, size }]);
  const t1 = performance.now();
  if (entry?.actions?.upload === undefined) throw new Error(`server already holds ${oid}: the upload would not be measured`);
  const lean = leanData === null ? null : await KeepAliveConnection.open(new URL(entry.actions.upload.href).origin);
  try {
    const t2 = performance.now();
    if (lean !== null) await client.putChunkedOver(lean, entry.actions.upload, syncSlices(leanData!));
    else await client.put(entry.actions.upload, body(), size);
    const t3 = performance.now();
    if (lean !== null) await client.verifyOver(lean, entry);
    else if (entry.actions.verify) await client.verify(entry.actions.verify, oid, size);
    const t4 = performance.now();
    return { batchMs: t1 - t0, putMs: t3 - t2, verifyMs: t4 - t3, totalMs: t1 - t0 + (t4 - t2) };
  } finally {
    lean?.close();
  }
}

/** Uploads measured each beside its own dd (see pairUp). */
export interface PairedUploads {
  /** Median upload rate, MB/s. */
  readonly rate: number;
  /** Median of the dd runs beside them, MB/s. */
  readonly dd: number;
  /** Median of upload ÷ its own dd: the figure the targets are judged by. */
  readonly ratio: number;
  /** Each pair, for the detail column: "upload/dd". */
  readonly pairs: string;
}


/**
 * The upload targets are ratios to `dd … conv=fdatasync` on a shared 2-core VM whose disk and CPU
 * rates move by half between minutes. So each upload is measured right beside a dd of the same size
 * (before it in one pair, after it in the next), and the target is judged by the median of those
 * per-pair ratios; the best-of figures stay in the table as they are.
 */
function pairUp(runs: { rate: number; dd: number }[]): PairedUploads {
  return {
    rate: median(runs.map((r) => r.rate)),
    dd: median(runs.map((r) => r.dd)),
    ratio: median(runs.map((r) => r.rate / r.dd)),
    pairs: runs.map((r) => `${fmt(r.rate)}/${fmt(r.dd)}`).join(', '),
  };
}

/**
 * Try `i` of a paired upload measure: odd tries go through the lean client, even ones through undici;
 * the dd beside it runs before the try or after it, alternating (see pairUp).
 */
async function uploadTry(ctx: BenchContext, client: LfsClient, pid: number, obj: MemObject, i: number): Promise<{ t: Timed; cpu: ReturnType<ReturnType<typeof cpuMeter>>; dd: number }> {
  const count = Math.round(obj.size / MiB);
  // Tries 0, 1 | 2, 3 | 4, 5 …: dd before, after | after, before | before, after …
  const before = (i + (i >> 1)) % 2 === 0 ? await ddBeside(ctx, count) : null;
  const meter = cpuMeter(pid);
  const t = await timedUpload(client, obj.oid, obj.size, () => slices(obj.data), i % 2 === 1 ? obj.data : null);
  const cpu = meter();
  return { t, cpu, dd: before ?? (await ddBeside(ctx, count)) };
}

/** Upload tries per client, each beside its own dd: an odd number, so the median is one of them. */
const uploadPairs = (ctx: BenchContext): number => (ctx.quick ? 1 : 3);

function* syncSlices(data: Buffer, chunk = MiB): Generator<Buffer> {
  for (let at = 0; at < data.length; at += chunk) yield data.subarray(at, at + chunk);
}

/** batch(download) then GET into a null sink; returns ms and the href for later Range reads. */
async function timedDownload(client: LfsClient, oid: string, size: number): Promise<{ ms: number; href: string }> {
  const t0 = performance.now();
  const [entry] = await client.batch('download', [{ oid, size }]);
  const href = entry!.actions!.download!.href;
  const got = await client.download(href);
  const ms = performance.now() - t0;
  if (got !== size) throw new Error(`download returned ${got} of ${size} bytes`);
  return { ms, href };
}

/** Median and p90 of `n` Range reads of the last MiB. */
async function rangeLastMiB(client: LfsClient, href: string, size: number, n: number): Promise<{ p50: number; p90: number }> {
  const times: number[] = [];
  const range = `bytes=${size - MiB}-${size - 1}`;
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const got = await client.download(href, { range });
    times.push(performance.now() - t0);
    if (got !== MiB) throw new Error(`Range read returned ${got} bytes, expected ${MiB}`);
  }
  return { p50: percentile(times, 50), p90: percentile(times, 90) };
}

/** The figures of the raw-store server run, for the comparisons. */
export interface ServerFigures {
  upload1g?: number;
  upload1gLean?: number;
  upload1gPaired?: PairedUploads;
  upload1gLeanPaired?: PairedUploads;
  download1g?: number;
  download1gRaw?: number;
  range1gMs?: number;
  seqMsPerObject?: number;
  seqMsPerObjectOwnBatch?: number;
  seqMsPerObjectLean?: number;
  parObjectsPerSec?: number;
  parObjectsPerSecLean?: number;
}

/**
 * 1 GiB upload and download, Range reads, 64 KiB objects sequential and 8-parallel, against one
 * server with compression off (the default).
 */
export async function benchServer(ctx: BenchContext, forge: GitHubEmulator, only: (name: string) => boolean, partial: (f: ServerFigures) => void): Promise<ServerFigures> {
  // Handed out at once, so that the figures measured before a failure still reach the comparisons.
  const figures: ServerFigures = {};
  partial(figures);
  const s = await startStowage(ctx, forge, 'raw');
  let failed: unknown;
  try {
    const client = s.client;
    // Warm-up: the first request pays the forge lookup (then cached per token) and JIT compilation.
    const warm = new SeededBytes('warm').bytes(20 * 64 * 1024);
    for (let i = 0; i < 20; i++) {
      const o = memObject(warm.subarray(i * 65536, (i + 1) * 65536));
      await client.upload(o.oid, o.size, () => o.data);
    }

    const bigSize = ctx.quick ? 128 * MiB : GiB;
    const needBig = only('upload') || only('download') || only('range');
    let big: MemObject | null = null;
    let bigHref = '';
    if (needBig) {
      // A new object per try (the server keeps each); the machine is shared, so the best try is
      // recorded, and each try also has a dd of its own beside it (see pairUp), which the targets
      // are judged by. undici and the lean client take turns, so both see the same spells.
      type Run = { t: Timed; cpu: ReturnType<ReturnType<typeof cpuMeter>>; dd: number };
      const runs: Run[] = [];
      const leanRuns: Run[] = [];
      const rounds = only('upload') ? 2 * uploadPairs(ctx) : 1;
      for (let i = 0; i < rounds; i++) {
        big = memObject(new SeededBytes(`big-${i}`).bytes(bigSize));
        const obj = big;
        const lean = i % 2 === 1;
        const { t, cpu, dd } = await uploadTry(ctx, client, s.pid, obj, i);
        (lean ? leanRuns : runs).push({ t, cpu, dd });
      }
      const record = (key: string, label: string, list: Run[]): { best: number; paired: PairedUploads } => {
        const { t, cpu } = list.reduce((a, b) => (b.t.totalMs < a.t.totalMs ? b : a));
        const value = mbps(bigSize, t.totalMs);
        const paired = pairUp(list.map((r) => ({ rate: mbps(bigSize, r.t.totalMs), dd: r.dd })));
        ctx.record({
          key,
          group: 'server',
          label,
          value,
          unit: 'MB/s',
          detail: `best of ${list.length}; beside their own dd (upload/dd MB/s): ${paired.pairs}; batch ${fmt(t.batchMs)} ms, PUT ${fmt(t.putMs)} ms, verify ${fmt(t.verifyMs)} ms; ${cpuDetail(cpu, bigSize)}`,
        });
        return { best: value, paired };
      };
      if (only('upload')) {
        const u = record('server.upload_1g', `durable upload of ${bigSize / MiB} MiB (batch + PUT + verify), undici`, runs);
        const l = record('server.upload_1g_lean', `durable upload of ${bigSize / MiB} MiB, lean keep-alive client (PUT chunked)`, leanRuns);
        figures.upload1g = u.best;
        figures.upload1gPaired = u.paired;
        figures.upload1gLean = l.best;
        figures.upload1gLeanPaired = l.paired;
      }
    }
    if (big !== null && (only('download') || only('range'))) {
      const runs: { ms: number; cpu: ReturnType<ReturnType<typeof cpuMeter>> }[] = [];
      for (let i = 0; i < (only('download') ? tries(ctx) : 1); i++) {
        const meter = cpuMeter(s.pid);
        const d = await timedDownload(client, big.oid, big.size);
        runs.push({ ms: d.ms, cpu: meter() });
        bigHref = d.href;
      }
      if (only('download')) {
        // The same download into a bare socket: what the server sends when the client costs nothing.
        const raw: { ms: number; cpu: ReturnType<ReturnType<typeof cpuMeter>> }[] = [];
        for (let i = 0; i < tries(ctx); i++) {
          const meter = cpuMeter(s.pid);
          const t0 = performance.now();
          const got = await client.downloadRaw(bigHref);
          raw.push({ ms: performance.now() - t0, cpu: meter() });
          if (got !== bigSize) throw new Error(`raw download returned ${got} of ${bigSize} bytes`);
        }
        const bestRaw = raw.reduce((a, b) => (b.ms < a.ms ? b : a));
        figures.download1gRaw = mbps(bigSize, bestRaw.ms);
        ctx.record({ key: 'server.download_1g_raw', group: 'server', label: `download of ${bigSize / MiB} MiB into a bare TCP socket (GET only)`, value: figures.download1gRaw, unit: 'MB/s', detail: `best of ${raw.length} (${raw.map((r) => fmt(mbps(bigSize, r.ms))).join(', ')}); ${cpuDetail(bestRaw.cpu, bigSize)}` });
        const { ms, cpu } = runs.reduce((a, b) => (b.ms < a.ms ? b : a));
        figures.download1g = mbps(bigSize, ms);
        ctx.record({ key: 'server.download_1g', group: 'server', label: `download of ${bigSize / MiB} MiB to a null sink (batch + GET)`, value: figures.download1g, unit: 'MB/s', detail: `best of ${runs.length} (${runs.map((r) => fmt(mbps(bigSize, r.ms))).join(', ')}); ${cpuDetail(cpu, bigSize)}` });
      }
    }
    if (big !== null && only('range')) {
      const r = await rangeLastMiB(client, bigHref, big.size, 20);
      figures.range1gMs = r.p50;
      ctx.record({ key: 'server.range_1g', group: 'server', label: `Range read of the last MiB of a ${bigSize / MiB} MiB object (median)`, value: r.p50, unit: 'ms', detail: `p90 ${fmt(r.p90)} ms over 20 reads` });
    }
    big = null;

    if (only('seq64k')) {
      await journalRetired(s.server.dataDir);
      const n = ctx.quick ? 100 : 500;
      const pool = new SeededBytes('seq64k').bytes(3 * n * 65536);
      const objs = Array.from({ length: 3 * n }, (_, i) => memObject(pool.subarray(i * 65536, (i + 1) * 65536)));
      // git-lfs's pattern: one batch per 100 objects (lfs.transfer.batchSize), then PUT + verify each;
      // through undici, then through one lean keep-alive connection (see KeepAliveConnection).
      const msA = await sequentialUpload(objs.slice(0, n), (entry, o) => client.transfer(entry, () => o.data), client);
      figures.seqMsPerObject = msA;
      const lean = await KeepAliveConnection.open(s.server.url);
      try {
        figures.seqMsPerObjectLean = await sequentialUpload(objs.slice(2 * n), (entry, o) => client.transferOver(lean, entry, o.data), client);
      } finally {
        lean.close();
      }
      // Stricter: a batch of its own for every object, with the phases timed.
      const per: number[] = [];
      const phase = { batch: 0, put: 0, verify: 0 };
      for (const o of objs.slice(n, 2 * n)) {
        const t = await timedUpload(client, o.oid, o.size, () => slices(o.data));
        per.push(t.totalMs);
        phase.batch += t.batchMs;
        phase.put += t.putMs;
        phase.verify += t.verifyMs;
      }
      const meanB = per.reduce((a, b) => a + b, 0) / n;
      figures.seqMsPerObjectOwnBatch = meanB;
      ctx.record({ key: 'server.seq_64k', group: 'server', label: `${n} × 64 KiB sequential, git-lfs pattern (batch per 100, PUT + verify each), undici`, value: msA, unit: 'ms/object', detail: `${fmt(1000 / msA)} objects/s` });
      const msL = figures.seqMsPerObjectLean;
      ctx.record({ key: 'server.seq_64k_lean', group: 'server', label: `${n} × 64 KiB sequential, git-lfs pattern, lean keep-alive client`, value: msL, unit: 'ms/object', detail: `${fmt(1000 / msL)} objects/s; batches through undici, PUTs over one bare keep-alive connection` });
      ctx.record({
        key: 'server.seq_64k_own_batch',
        group: 'server',
        label: `${n} × 64 KiB sequential, one batch per object`,
        value: meanB,
        unit: 'ms/object',
        detail: `p50 ${fmt(percentile(per, 50))}, p99 ${fmt(percentile(per, 99))} ms; mean batch ${fmt(phase.batch / n)}, PUT ${fmt(phase.put / n)}, verify ${fmt(phase.verify / n)} ms`,
      });
    }

    if (only('par64k')) {
      const n = ctx.quick ? 400 : 2000;
      const pool = new SeededBytes('par64k').bytes(2 * n * 65536);
      const objs = Array.from({ length: 2 * n }, (_, i) => memObject(pool.subarray(i * 65536, (i + 1) * 65536)));
      const run = async (group: MemObject[], lean: KeepAliveConnection[] | null): Promise<{ perSec: number; detail: string }> => {
        await journalRetired(s.server.dataDir);
        const meter = cpuMeter(s.pid);
        const t0 = performance.now();
        await parallelUpload(client, group, 8, lean);
        const ms = performance.now() - t0;
        const cpu = meter();
        return { perSec: n / (ms / 1000), detail: `${fmt(ms / n)} ms/object wall; CPU per object: server ${fmt((cpu.server * 1000) / n)} ms (event loop ${fmt((cpu.loop * 1000) / n)}), client ${fmt((cpu.client * 1000) / n)} ms` };
      };
      const viaUndici = await run(objs.slice(0, n), null);
      figures.parObjectsPerSec = viaUndici.perSec;
      ctx.record({ key: 'server.par_64k', group: 'server', label: `${n} × 64 KiB, 8 parallel uploaders (batch per 100), undici`, value: viaUndici.perSec, unit: 'objects/s', detail: viaUndici.detail });
      const conns = await Promise.all(Array.from({ length: 8 }, () => KeepAliveConnection.open(s.server.url)));
      try {
        const viaLean = await run(objs.slice(n), conns);
        figures.parObjectsPerSecLean = viaLean.perSec;
        ctx.record({ key: 'server.par_64k_lean', group: 'server', label: `${n} × 64 KiB, 8 parallel uploaders, lean keep-alive clients`, value: viaLean.perSec, unit: 'objects/s', detail: `${viaLean.detail}; batches through undici, PUTs over 8 bare keep-alive connections` });
        // The deferred cost of the burst: its objects written to files of their own in the lull after it.
        const retiredS = await journalRetired(s.server.dataDir);
        ctx.record({ key: 'server.retire_after_burst', group: 'server', label: `journal retired after the ${n}-object burst`, value: retiredS, unit: 's', detail: 'from the burst\'s end until no journal segment is left (its 1 s lull included)' });
      } finally {
        for (const c of conns) c.close();
      }
    }
  } catch (e) {
    failed = e;
    throw e;
  } finally {
    await s.stop(failed);
  }
  return figures;
}



/** git-lfs's sequential pattern: one batch per 100 objects, then each object in turn; ms per object. */
async function sequentialUpload(objs: MemObject[], transfer: (entry: BatchObject, o: MemObject) => Promise<void>, client: LfsClient): Promise<number> {
  const t0 = performance.now();
  for (let g = 0; g < objs.length; g += 100) {
    const group = objs.slice(g, g + 100);
    const entries = await client.batch('upload', group.map((o) => ({ oid: o.oid, size: o.size })));
    for (let i = 0; i < entries.length; i++) await transfer(entries[i]!, group[i]!);
  }
  return (performance.now() - t0) / objs.length;
}

/** Signed MiB for a growth figure ("+4.40", "−10.5": RSS can end below the idle baseline after a GC). */
const growth = (bytes: number): string => `${bytes < 0 ? '−' : '+'}${fmt(Math.abs(bytes) / MiB)}`;

/**
 * git-lfs's upload loop: a producer asks for batches of 100 while 8 transfer workers PUT + verify
 * whatever the batches handed out (tq/transfer_queue.go: lfs.concurrenttransfers = 8).
 */
async function parallelUpload(client: LfsClient, objs: MemObject[], workers: number, lean: KeepAliveConnection[] | null = null): Promise<void> {
  const queue: { entry: BatchObject; obj: MemObject }[] = [];
  let producing = true;
  const sleepers: (() => void)[] = [];
  const wakeAll = (): void => {
    for (const w of sleepers.splice(0)) w();
  };
  const producer = (async () => {
    try {
      for (let g = 0; g < objs.length; g += 100) {
        const group = objs.slice(g, g + 100);
        const entries = await client.batch('upload', group.map((o) => ({ oid: o.oid, size: o.size })));
        entries.forEach((entry, i) => queue.push({ entry, obj: group[i]! }));
        wakeAll();
        // Keep at most two batches ahead of the transfers, as the client does.
        while (queue.length > 200) await new Promise((r) => setTimeout(r, 1));
      }
    } finally {
      producing = false;
      wakeAll();
    }
  })();
  const worker = async (w: number): Promise<void> => {
    for (;;) {
      const job = queue.shift();
      if (job === undefined) {
        if (!producing) return;
        await new Promise<void>((r) => sleepers.push(r));
        continue;
      }
      if (lean !== null) await client.transferOver(lean[w]!, job.entry, job.obj.data);
      else await client.transfer(job.entry, () => job.obj.data);
    }
  };
  await Promise.all([producer, ...Array.from({ length: workers }, (_, w) => worker(w))]);
}

/** Peak RSS growth of the server over its idle baseline, per phase. */
export interface RssFigures {
  baseline: number;
  upload: number;
  download: number;
  slowReader: number;
  peak: number;
  upload5gMbps: number;
  download5gMbps: number;
  range5gMs: number;
}

/** Measures one phase: peak VmRSS (see peakRssOver) minus the baseline. */
async function phasePeak(pid: number, baseline: number, run: () => Promise<void>): Promise<number> {
  const peak = peakRssOver(pid);
  await run();
  return (await peak.stop()) - baseline;
}

/**
 * A multi-gigabyte object through a fresh server: upload (streamed from the seeded generator after a
 * first pass computed its sha256), full download, a slow reader, and Range reads of its last MiB,
 * with the server's RSS growth over its idle baseline for each phase.
 */
export async function benchRss(ctx: BenchContext, forge: GitHubEmulator, env: Record<string, string> = {}, tag = 'raw', source: 'random' | 'text' = 'random'): Promise<RssFigures> {
  // ≥ 1,000,000,000 bytes even in quick mode, so the chunked large-object path is what runs.
  const size = ctx.quick ? 1_100_000_000 : 5 * GiB;
  const s = await startStowage(ctx, forge, `rss-${tag}`, env);
  let failed: unknown;
  try {
    const client = s.client;
    // Warm the code paths (batch, auth cache, PUT, GET) so that the baseline is the idle steady state:
    // several frames of the same kind of data, so that the framed writer and reader, the workers and
    // their zstd contexts exist before it (a 1 MB object would only take the small-object journal path).
    const warmSize = 9 * MiB;
    const w = memObject(source === 'random' ? new SeededBytes('rss-warm').bytes(warmSize) : textLike(warmSize, 5));
    await client.upload(w.oid, w.size, () => slices(w.data));
    const [we] = await client.batch('download', [{ oid: w.oid, size: w.size }]);
    await client.download(we!.actions!.download!.href);

    const chunks = source === 'random' ? (n: number) => generated(new SeededBytes(`rss-${tag}`), n) : (n: number) => cycledText(n);
    const oid = source === 'random' ? new SeededBytes(`rss-${tag}`).sha256(size) : await sha256Of(cycledText(size));
    await new Promise((r) => setTimeout(r, 1000));
    const idle: number[] = [];
    for (let i = 0; i < 10; i++) {
      idle.push(rssOf(s.pid).rss);
      await new Promise((r) => setTimeout(r, 50));
    }
    const baseline = percentile(idle, 50);

    let up: Timed | null = null;
    let upMeter = cpuMeter(s.pid);
    const upload = await phasePeak(s.pid, baseline, async () => {
      upMeter = cpuMeter(s.pid);
      up = await timedUpload(client, oid, size, () => chunks(size));
    });
    const upCpu = upMeter();
    let downMs = 0;
    let href = '';
    let downMeter = cpuMeter(s.pid);
    const download = await phasePeak(s.pid, baseline, async () => {
      downMeter = cpuMeter(s.pid);
      const d = await timedDownload(client, oid, size);
      downMs = d.ms;
      href = d.href;
    });
    const downCpu = downMeter();
    // A slow reader (50 MB/s for 3 s, then it hangs up): the server must hold only a bounded window.
    const slowReader = await phasePeak(s.pid, baseline, async () => {
      await client.download(href, { throttle: 50e6, limit: ctx.quick ? 50e6 : 150e6 });
    });
    const range = await rangeLastMiB(client, href, size, 10);
    const figures: RssFigures = {
      baseline,
      upload,
      download,
      slowReader,
      peak: Math.max(upload, download, slowReader),
      upload5gMbps: mbps(size, up!.totalMs),
      download5gMbps: mbps(size, downMs),
      range5gMs: range.p50,
    };
    const gib = (size / GiB).toFixed(2);
    const what = tag === 'raw' ? '' : ` [${tag}]`;
    ctx.record({ key: `server.rss_${tag}`, group: 'server', label: `server RSS growth while ${gib} GiB move (peak of all phases)${what}`, value: figures.peak / MiB, unit: 'MiB', detail: `idle baseline ${fmt(baseline / MiB)} MiB; upload ${growth(upload)}, download ${growth(download)}, slow reader ${growth(slowReader)} MiB (50 ms VmRSS samples and VmHWM)` });
    ctx.record({ key: `server.upload_5g_${tag}`, group: 'server', label: `upload of ${gib} GiB, streamed${what}`, value: figures.upload5gMbps, unit: 'MB/s', detail: `PUT ${fmt(up!.putMs)} ms; bytes generated while sent; ${cpuDetail(upCpu, size)}` });
    ctx.record({ key: `server.download_5g_${tag}`, group: 'server', label: `download of ${gib} GiB${what}`, value: figures.download5gMbps, unit: 'MB/s', detail: cpuDetail(downCpu, size) });
    ctx.record({ key: `server.range_5g_${tag}`, group: 'server', label: `Range read of the last MiB of the ${gib} GiB object (median)${what}`, value: range.p50, unit: 'ms', detail: `p90 ${fmt(range.p90)} ms over 10 reads` });
    return figures;
  } catch (e) {
    failed = e;
    throw e;
  } finally {
    await s.stop(failed);
  }
}

let textBlock: Buffer | null = null;

/** Text-like bytes of any length: a 32 MiB text block repeated (each 4 MiB frame still compresses alone). */
async function* cycledText(size: number): AsyncGenerator<Buffer> {
  textBlock ??= textLike(32 * MiB);
  for (let at = 0; at < size; at += MiB) {
    const off = at % textBlock.length;
    yield textBlock.subarray(off, off + Math.min(MiB, size - at));
  }
}

async function sha256Of(chunks: AsyncIterable<Buffer>): Promise<string> {
  const h = createHash('sha256');
  for await (const c of chunks) h.update(c);
  return h.digest('hex');
}

/** Figures of the compressed-store run, when the server supports SVC_COMPRESSION. */
export interface CompressedFigures {
  uploadIncompressible?: number;
  uploadIncompressibleLean?: number;
  uploadIncompressiblePaired?: PairedUploads;
  uploadIncompressibleLeanPaired?: PairedUploads;
  downloadText?: number;
  range5gMs?: number;
}

/**
 * Issue 5's compressed targets, with `SVC_COMPRESSION=zstd:3`: 1 GiB incompressible upload, 1 GiB
 * text-like download, and a Range read at the end of a multi-GiB compressed object.
 */
export async function benchCompressed(ctx: BenchContext, forge: GitHubEmulator, partial: (f: CompressedFigures) => void): Promise<CompressedFigures> {
  const env = { SVC_COMPRESSION: 'zstd:3' };
  const size = ctx.quick ? 128 * MiB : GiB;
  const figures: CompressedFigures = {};
  partial(figures);
  const s = await startStowage(ctx, forge, 'zstd', env);
  let failed: unknown;
  try {
    const client = s.client;
    const w = memObject(new SeededBytes('z-warm').bytes(1_000_000));
    await client.upload(w.oid, w.size, () => slices(w.data));
    // Incompressible 1 GiB through both clients, taking turns, each beside its own dd (as above).
    type Run = { rate: number; dd: number; cpu: ReturnType<ReturnType<typeof cpuMeter>> };
    const runs: Run[] = [];
    const leanRuns: Run[] = [];
    for (let i = 0; i < 2 * uploadPairs(ctx); i++) {
      const rnd = memObject(new SeededBytes(`z-rnd-${i}`).bytes(size));
      const lean = i % 2 === 1;
      const { t: u, cpu, dd } = await uploadTry(ctx, client, s.pid, rnd, i);
      (lean ? leanRuns : runs).push({ rate: mbps(size, u.totalMs), dd, cpu });
    }
    const record = (key: string, label: string, list: Run[]): { best: number; paired: PairedUploads } => {
      const best = list.reduce((a, b) => (b.rate > a.rate ? b : a));
      const paired = pairUp(list);
      ctx.record({ key, group: 'server', label, value: best.rate, unit: 'MB/s', detail: `best of ${list.length}; beside their own dd (upload/dd MB/s): ${paired.pairs}; ${cpuDetail(best.cpu, size)}` });
      return { best: best.rate, paired };
    };
    const u = record('server.zstd3.upload_incompressible', `[zstd:3] durable upload of ${size / MiB} MiB incompressible, undici`, runs);
    const l = record('server.zstd3.upload_incompressible_lean', `[zstd:3] durable upload of ${size / MiB} MiB incompressible, lean keep-alive client`, leanRuns);
    figures.uploadIncompressible = u.best;
    figures.uploadIncompressiblePaired = u.paired;
    figures.uploadIncompressibleLean = l.best;
    figures.uploadIncompressibleLeanPaired = l.paired;
    let meter: ReturnType<typeof cpuMeter>;
    let cpu: ReturnType<ReturnType<typeof cpuMeter>>;
    const text: Buffer[] = [];
    for await (const c of cycledText(size)) text.push(c);
    const txt = memObject(Buffer.concat(text));
    meter = cpuMeter(s.pid);
    const ut = await timedUpload(client, txt.oid, txt.size, () => slices(txt.data));
    cpu = meter();
    ctx.record({ key: 'server.zstd3.upload_text', group: 'server', label: `[zstd:3] durable upload of ${size / MiB} MiB text-like`, value: mbps(size, ut.totalMs), unit: 'MB/s', detail: cpuDetail(cpu, size) });
    meter = cpuMeter(s.pid);
    const d = await timedDownload(client, txt.oid, txt.size);
    cpu = meter();
    ctx.record({ key: 'server.zstd3.download_text', group: 'server', label: `[zstd:3] download of ${size / MiB} MiB text-like (undici)`, value: mbps(size, d.ms), unit: 'MB/s', detail: cpuDetail(cpu, size) });
    // Into a bare socket as well: the target is about what the server sends, not what undici parses.
    meter = cpuMeter(s.pid);
    const t0 = performance.now();
    const got = await client.downloadRaw(d.href);
    const rawMs = performance.now() - t0;
    cpu = meter();
    if (got !== size) throw new Error(`raw download returned ${got} of ${size} bytes`);
    figures.downloadText = mbps(size, rawMs);
    ctx.record({ key: 'server.zstd3.download_text_raw', group: 'server', label: `[zstd:3] download of ${size / MiB} MiB text-like into a bare TCP socket`, value: figures.downloadText, unit: 'MB/s', detail: cpuDetail(cpu, size) });
  } catch (e) {
    failed = e;
    throw e;
  } finally {
    await s.stop(failed);
  }
  const rss = await benchRss(ctx, forge, env, 'zstd3', 'text');
  figures.range5gMs = rss.range5gMs;
  return figures;
}

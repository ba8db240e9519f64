/**
 * Uploads and downloads through Debian's curl, as a user would script them: its default buffer
 * sizes, `Expect: 100-continue` as it sends it on a PUT, one keep-alive process for a sequence of
 * objects, one process per parallel client. Batches go through undici (the bench's LFS client);
 * every byte of an object goes through curl.
 */
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { linkSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runClient } from './lib/client-run.js';
import { BigSource, checked, clientRounds, curlGet, curlPut, parallelPuts, putConfig, smallRound, USER, uploadBig, warmUpDetail, warmUpRounds } from './lib/curl.js';
import { GiB, MiB, SeededBytes } from './lib/data-gen.js';
import { ddBesideBusy } from './lib/dd.js';
import { startPeer } from './lib/peers.js';
import { cpuSecondsOf, machineBusySeconds } from './lib/proc-stats.js';
import { fmt } from './lib/report.js';
import type { ClientRound, RealClientSession } from './lib/session.js';
import { mbps, median } from './lib/stats.js';
import { journalRetired, memObject } from './lib/stowage.js';


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

/**
 * Raw limits of this machine: what any LFS server here could at best reach. Each function records
 * its figures through `ctx.record` and returns the headline value for the comparisons.
 */
import { Blake3Hasher } from '@napi-rs/blake-hash';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { open, rename, rm, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { Compressor, Decompressor } from 'zstd-napi';
import { tries, type BenchContext } from './lib/context.js';
import { GiB, MiB, SeededBytes, meshLike, textLike } from './lib/data-gen.js';
import { dd } from './lib/dd.js';
import { rawGet } from './lib/lfs-client.js';
import { startPeer } from './lib/peers.js';
import { fmt } from './lib/report.js';
import { mbps, percentile } from './lib/stats.js';

/** node:crypto sha256 over `total` bytes fed in 1 MiB updates, as an upload's hashing sees them. */
export function benchSha256(ctx: BenchContext): number {
  const total = ctx.quick ? 256 * MiB : GiB;
  const buf = new SeededBytes('sha').bytes(64 * MiB);
  createHash('sha256').update(buf.subarray(0, 8 * MiB)).digest(); // warm-up
  const h = createHash('sha256');
  const t0 = performance.now();
  for (let done = 0; done < total; done += MiB) h.update(buf.subarray(done % buf.length, (done % buf.length) + MiB));
  h.digest();
  const ms = performance.now() - t0;
  const rate = mbps(total, ms);
  ctx.record({ key: 'limits.sha256', group: 'limits', label: 'sha256 (node:crypto), 1 MiB updates', value: rate, unit: 'MB/s', detail: `${fmt(ms / (total / MiB))} ms per MiB over ${total / MiB} MiB` });
  return rate;
}

/** BLAKE3 (@napi-rs/blake-hash) streaming in 1 MiB updates, and one-shot over 4 MiB frames. */
export function benchBlake3(ctx: BenchContext): number {
  const total = ctx.quick ? 256 * MiB : GiB;
  const buf = new SeededBytes('blake').bytes(64 * MiB);
  new Blake3Hasher().update(buf.subarray(0, 8 * MiB)).digest('hex');
  const h = new Blake3Hasher();
  let t0 = performance.now();
  for (let done = 0; done < total; done += MiB) h.update(buf.subarray(done % buf.length, (done % buf.length) + MiB));
  h.digest('hex');
  const ms = performance.now() - t0;
  const rate = mbps(total, ms);
  t0 = performance.now();
  for (let done = 0; done < total; done += 4 * MiB) {
    const at = done % buf.length;
    new Blake3Hasher().update(buf.subarray(at, at + 4 * MiB)).digestBuffer();
  }
  const frameMs = performance.now() - t0;
  ctx.record({ key: 'limits.blake3', group: 'limits', label: 'BLAKE3 (@napi-rs/blake-hash), 1 MiB updates', value: rate, unit: 'MB/s', detail: `${fmt(ms / (total / MiB))} ms per MiB; one digest per 4 MiB frame: ${fmt(mbps(total, frameMs))} MB/s` });
  return rate;
}

/**
 * zstd (zstd-napi) at levels 1, 3 and 9 on three kinds of data, compressing independent 4 MiB frames
 * as the store does; decompression is timed over the same frames.
 */
export function benchZstd(ctx: BenchContext): void {
  const size = ctx.quick ? 8 * MiB : 32 * MiB;
  const frame = 4 * MiB;
  const kinds: [string, Buffer][] = [
    ['incompressible', new SeededBytes('zstd').bytes(size)],
    ['mesh-like', meshLike(size)],
    ['text-like', textLike(size)],
  ];
  for (const level of [1, 3, 9]) {
    const cmp = new Compressor();
    cmp.setParameters({ compressionLevel: level });
    const dec = new Decompressor();
    for (const [kind, data] of kinds) {
      // Warm-up: allocate the contexts at this level and fault in the output buffers.
      dec.decompress(cmp.compress(data.subarray(0, frame)));
      const frames: Buffer[] = [];
      let t0 = performance.now();
      for (let at = 0; at < data.length; at += frame) frames.push(cmp.compress(data.subarray(at, at + frame)));
      const cms = performance.now() - t0;
      const stored = frames.reduce((n, f) => n + f.length, 0);
      t0 = performance.now();
      let out = 0;
      for (const f of frames) out += dec.decompress(f).length;
      const dms = performance.now() - t0;
      if (out !== data.length) throw new Error(`zstd round trip lost bytes: ${out} of ${data.length}`);
      const ratio = data.length / stored;
      ctx.record({ key: `limits.zstd${level}.${kind}.compress`, group: 'limits', label: `zstd-${level} compress, ${kind}`, value: mbps(data.length, cms), unit: 'MB/s', detail: `ratio ${ratio.toFixed(2)} (4 MiB frames, ${size / MiB} MiB)` });
      ctx.record({ key: `limits.zstd${level}.${kind}.decompress`, group: 'limits', label: `zstd-${level} decompress, ${kind}`, value: mbps(data.length, dms), unit: 'MB/s', detail: `output MB/s` });
    }
  }
}

/** Sequential 1 MiB writes of `total` bytes into a new file, then one fdatasync: the durable write rate. */
export async function benchDiskWrite(ctx: BenchContext): Promise<number> {
  const total = ctx.quick ? 256 * MiB : GiB;
  const path = join(ctx.scratch, 'disk-write.bin');
  const pattern = new SeededBytes('disk').bytes(16 * MiB);
  const runs: { ms: number; writeMs: number }[] = [];
  for (let i = 0; i < tries(ctx); i++) {
    const fh = await open(path, 'w');
    try {
      const t0 = performance.now();
      for (let done = 0; done < total; done += MiB) await fh.write(pattern, done % pattern.length, MiB);
      const writeMs = performance.now() - t0;
      await fh.datasync();
      runs.push({ ms: performance.now() - t0, writeMs });
    } finally {
      await fh.close();
      await unlink(path).catch(() => undefined);
    }
  }
  const best = runs.reduce((a, b) => (b.ms < a.ms ? b : a));
  const rate = mbps(total, best.ms);
  ctx.record({
    key: 'limits.disk_write',
    group: 'limits',
    label: `disk write ${total / MiB} MiB + fdatasync (node:fs, 1 MiB writes)`,
    value: rate,
    unit: 'MB/s',
    detail: `best of ${runs.length} (${runs.map((r) => fmt(mbps(total, r.ms))).join(', ')}); writes ${fmt(best.writeMs)} ms, then fdatasync ${fmt(best.ms - best.writeMs)} ms`,
  });
  return rate;
}


/** `dd if=/dev/zero of=… bs=1M count=1024 conv=fdatasync`, the yardstick of the upload targets. */
export function benchDd(ctx: BenchContext): number | null {
  const count = ctx.quick ? 256 : 1024;
  const path = join(ctx.scratch, 'dd.bin');
  const runs: { rate: number; says: string }[] = [];
  for (let i = 0; i < tries(ctx); i++) {
    const r = dd(path, count);
    spawnSync('rm', ['-f', path]);
    if (r.failed !== null) {
      ctx.note(`dd failed: ${r.failed}`);
      return null;
    }
    runs.push(r);
  }
  const best = runs.reduce((a, b) => (b.rate > a.rate ? b : a));
  ctx.record({ key: 'limits.dd', group: 'limits', label: `dd bs=1M count=${count} conv=fdatasync`, value: best.rate, unit: 'MB/s', detail: `best of ${runs.length} (${runs.map((r) => fmt(r.rate)).join(', ')}); dd says: ${best.says}` });
  if (!ctx.quick) benchDdGrowing(ctx, count);
  benchDdDirect(ctx, count);
  return best.rate;
}

/** The same dd with oflag=direct: past the page cache, as large uploads write (one 1 MiB write at a time). */
function benchDdDirect(ctx: BenchContext, count: number): void {
  const path = join(ctx.scratch, 'dd-direct.bin');
  const rates: number[] = [];
  for (let i = 0; i < tries(ctx); i++) {
    const r = dd(path, count, true);
    spawnSync('rm', ['-f', path]);
    if (r.failed !== null) return; // a file system without O_DIRECT
    rates.push(r.rate);
  }
  ctx.record({ key: 'limits.dd_direct', group: 'limits', label: `dd as above with oflag=direct`, value: Math.max(...rates), unit: 'MB/s', detail: `best of ${rates.map((r) => fmt(r)).join(', ')}; the path large uploads take (O_DIRECT), one write in flight` });
}

/**
 * The same dd three times, keeping the files: the page cache then grows into memory this VM has not
 * touched yet, and each first touch of a guest page costs a host fault. Uploads that keep their
 * objects meet the same cost, so this says how much of a slow run is the machine's.
 */
function benchDdGrowing(ctx: BenchContext, count: number): void {
  const rates: number[] = [];
  const paths = [1, 2, 3].map((i) => join(ctx.scratch, `dd-keep-${i}.bin`));
  for (const path of paths) {
    const r = dd(path, count);
    if (r.failed !== null) break;
    rates.push(r.rate);
  }
  for (const path of paths) spawnSync('rm', ['-f', path]);
  if (rates.length === 0) return;
  ctx.record({
    key: 'limits.dd_growing',
    group: 'limits',
    label: `dd as above, 3 times keeping the files (page cache grows)`,
    value: Math.min(...rates),
    unit: 'MB/s',
    detail: `slowest of ${rates.map((r) => fmt(r)).join(', ')}; on this VM the first touch of guest memory costs a host fault`,
  });
}

/**
 * What one durable small object costs the disk: a new 64 KiB file written and fsync'd, and the whole
 * floor a store pays (create, write, fsync, close, rename into place, fsync the directory).
 */
export async function benchFsync(ctx: BenchContext): Promise<{ fsyncMs: number; floorMs: number; parallelPerSec: number; appendMs: number; prewrittenMs: number }> {
  const n = ctx.quick ? 50 : 200;
  const dir = join(ctx.scratch, 'fsync');
  const final = join(dir, 'final');
  mkdirSync(final, { recursive: true });
  const body = randomBytes(64 * 1024);
  const syncs: number[] = [];
  const floors: number[] = [];
  const dirFh = await open(final, 'r');
  try {
    for (let i = 0; i < n; i++) {
      const tmp = join(dir, `obj-${i}.part`);
      const t0 = performance.now();
      const fh = await open(tmp, 'wx');
      await fh.write(body);
      const t1 = performance.now();
      await fh.sync();
      syncs.push(performance.now() - t1);
      await fh.close();
      await rename(tmp, join(final, `obj-${i}`));
      await dirFh.sync();
      floors.push(performance.now() - t0);
    }
  } finally {
    await dirFh.close();
    await rm(dir, { recursive: true, force: true });
  }
  const fsyncMs = percentile(syncs, 50);
  const floorMs = percentile(floors, 50);
  const appendMs = await appendDurable(ctx, body, n);
  const prewrittenMs = await appendDurable(ctx, body, n, true);
  const parallelPerSec = await parallelDurableFiles(ctx, body, 8, ctx.quick ? 200 : 800);
  ctx.record({ key: 'limits.fsync_64k', group: 'limits', label: 'fsync of a new 64 KiB file (median)', value: fsyncMs, unit: 'ms', detail: `p90 ${fmt(percentile(syncs, 90))} ms over ${n} files` });
  ctx.record({ key: 'limits.durable_64k_floor', group: 'limits', label: 'durable 64 KiB object floor: create+write+fsync+rename+dir fsync (median)', value: floorMs, unit: 'ms', detail: `p90 ${fmt(percentile(floors, 90))} ms; one at a time` });
  ctx.record({ key: 'limits.append_64k', group: 'limits', label: '64 KiB appended to an open file + fdatasync (median)', value: appendMs, unit: 'ms', detail: 'the floor of a pack/log layout for small objects: no new file, no rename, no directory fsync' });
  ctx.record({ key: 'limits.append_64k_prewritten', group: 'limits', label: '64 KiB written into zeroed, synced blocks + fdatasync (median)', value: prewrittenMs, unit: 'ms', detail: 'a prepared journal segment: no block allocation, so no file-system journal commit' });
  ctx.record({ key: 'limits.durable_64k_parallel', group: 'limits', label: 'durable 64 KiB files, 8 writers, directory fsync group-committed', value: parallelPerSec, unit: 'files/s', detail: 'what 8 parallel uploads could reach with no HTTP, hashing or index' });
  return { fsyncMs, floorMs, parallelPerSec, appendMs, prewrittenMs };
}

/** Median cost of appending 64 KiB to one open file and fdatasync-ing it, `n` times. */
/**
 * 64 KiB writes, each followed by fdatasync, one after another at the end of a file: growing it, or
 * (`prewritten`) into blocks written with zeros and synced beforehand, as the journal's prepared
 * segments are.
 */
async function appendDurable(ctx: BenchContext, body: Buffer, n: number, prewritten = false): Promise<number> {
  const path = join(ctx.scratch, 'append.bin');
  const fh = await open(path, prewritten ? 'w' : 'a');
  const times: number[] = [];
  try {
    if (prewritten) {
      const zeros = Buffer.alloc(1 << 20);
      for (let at = 0; at < n * body.length; at += zeros.length) await fh.write(zeros, 0, zeros.length, at);
      await fh.datasync();
    }
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await fh.write(body, 0, body.length, i * body.length);
      await fh.datasync();
      times.push(performance.now() - t0);
    }
  } finally {
    await fh.close();
    await unlink(path).catch(() => undefined);
  }
  return percentile(times, 50);
}

/**
 * `writers` concurrent loops each creating, writing and fsyncing 64 KiB files and renaming them into
 * one directory, whose fsync is shared by every rename that happened before it started (group commit).
 */
async function parallelDurableFiles(ctx: BenchContext, body: Buffer, writers: number, total: number): Promise<number> {
  const dir = join(ctx.scratch, 'fsync-par');
  const final = join(dir, 'final');
  mkdirSync(final, { recursive: true });
  const dirFh = await open(final, 'r');
  let round: Promise<void> | null = null;
  let next: Promise<void> | null = null;
  // A rename is durable once a directory fsync that *started after it* has finished.
  const dirSync = (): Promise<void> => {
    if (round === null) {
      round = dirFh.sync().finally(() => (round = null));
      return round;
    }
    next ??= round.then(() => {
      next = null;
      return dirSync();
    });
    return next;
  };
  let issued = 0;
  try {
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: writers }, async () => {
        while (issued < total) {
          const i = issued++;
          const tmp = join(dir, `p-${i}.part`);
          const fh = await open(tmp, 'wx');
          await fh.write(body);
          await fh.sync();
          await fh.close();
          await rename(tmp, join(final, `p-${i}`));
          await dirSync();
        }
      }),
    );
    return total / ((performance.now() - t0) / 1000);
  } finally {
    await dirFh.close();
    await rm(dir, { recursive: true, force: true });
  }
}


/**
 * Loopback limits with undici as the client and a plain node:http peer in its own process:
 * receive (undici PUTs `total` bytes chunked, the peer discards them) and send (the peer serves
 * `total` bytes, undici discards them). These bound what our upload and download can reach here.
 */
export async function benchLoopback(ctx: BenchContext): Promise<{ receive: number; send: number; sendBare: number }> {
  const total = ctx.quick ? 256 * MiB : GiB;
  const block = new SeededBytes('loop').bytes(MiB);
  const peer = await startPeer();
  const dispatcher = new Agent({ connections: 1, bodyTimeout: 0, headersTimeout: 0 });
  try {
    async function* body(): AsyncGenerator<Buffer> {
      for (let done = 0; done < total; done += MiB) yield block;
    }
    const recv: number[] = [];
    const sent: number[] = [];
    for (let i = 0; i < tries(ctx); i++) {
      let t0 = performance.now();
      const res = await request(`http://127.0.0.1:${peer.port}/sink`, { method: 'PUT', dispatcher, body: body() as never });
      const got = (await res.body.json()) as { received: number };
      recv.push(performance.now() - t0);
      if (got.received !== total) throw new Error(`loopback sink received ${got.received} of ${total}`);
      t0 = performance.now();
      const down = await request(`http://127.0.0.1:${peer.port}/bytes/${total}`, { dispatcher });
      let n = 0;
      await new Promise<void>((ok, fail) => {
        down.body.on('data', (c: Buffer) => (n += c.length));
        down.body.once('end', ok);
        down.body.once('error', fail);
      });
      sent.push(performance.now() - t0);
      if (n !== total) throw new Error(`loopback source sent ${n} of ${total}`);
    }
    const bare: number[] = [];
    for (let i = 0; i < tries(ctx); i++) {
      const t0 = performance.now();
      const n = await rawGet(`http://127.0.0.1:${peer.port}/bytes/${total}`);
      bare.push(performance.now() - t0);
      if (n !== total) throw new Error(`loopback source sent ${n} of ${total} to the bare socket`);
    }
    const recvMs = Math.min(...recv);
    const sendMs = Math.min(...sent);
    const bareMs = Math.min(...bare);
    const receive = mbps(total, recvMs);
    const send = mbps(total, sendMs);
    ctx.record({ key: 'limits.loopback_receive', group: 'limits', label: `loopback receive: undici PUT ${total / MiB} MiB → node:http sink`, value: receive, unit: 'MB/s', detail: `chunked, peer in its own process; best of ${recv.length} (${recv.map((ms) => fmt(mbps(total, ms))).join(', ')})` });
    ctx.record({ key: 'limits.loopback_send', group: 'limits', label: `loopback send: node:http ${total / MiB} MiB → undici null sink`, value: send, unit: 'MB/s', detail: `what a download could reach from a node:http server; best of ${sent.length} (${sent.map((ms) => fmt(mbps(total, ms))).join(', ')})` });
    const sendBare = mbps(total, bareMs);
    ctx.record({ key: 'limits.loopback_send_bare', group: 'limits', label: `loopback send: node:http ${total / MiB} MiB → bare TCP socket`, value: sendBare, unit: 'MB/s', detail: `the receiver costs next to nothing; best of ${bare.length} (${bare.map((ms) => fmt(mbps(total, ms))).join(', ')})` });
    return { receive, send, sendBare };
  } finally {
    await dispatcher.close();
    peer.stop();
  }
}

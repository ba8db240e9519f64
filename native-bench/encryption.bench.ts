/**
 * Encryption at rest's cost through curl: a 1 GiB upload (`curl -T`) and a warm download (`curl -o
 * /dev/null`, the object file in the page cache) to a server with encryption on and to one with it
 * off (disk store, compression off), alternating which goes first, 3 rounds; then a 1 MiB Range read
 * from the middle of the encrypted 1 GiB object, through curl (checked against the source), and
 * in-process over the same data directory with the backend's reads counted: the stored bytes the
 * layer read, hence decrypted, for that range.
 *
 * Then N 64 KiB uploads through one curl process, on and off alternating (the journal's part).
 *
 *   npm run bench:build && flock /work/bench.lock node native-bench/dist/encryption.bench.js [--rounds=3] [--size=MiB] [--small=N] [--profile=DIR]
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BigSource, checked, curlGet, putConfig, smallRound, uploadBig, USER } from './lib/curl.js';
import { runClient } from './lib/client-run.js';
import { GiB, MiB } from './lib/data-gen.js';
import { cpuSecondsOf, mainThreadCpuSecondsOf, peakRssOver } from './lib/proc-stats.js';
import { idleRss } from './lib/session.js';
import { fromProduct } from './lib/product.js';
import { startForge, startStowage, type Stowage } from './lib/stowage.js';

const ROUNDS = Number(/^--rounds=(\d+)$/.exec(process.argv.find((a) => a.startsWith('--rounds=')) ?? '')?.[1] ?? 3);
const arg = (name: string): string | undefined => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
/** --size=MiB for a quick look; --profile=DIR: the servers' V8 CPU profiles there. */
const SIZE = Number(arg('size') ?? GiB / MiB) * MiB;
/** --small=N: 64 KiB objects uploaded one after another per round. */
const SMALL = Number(arg('small') ?? 500);
const scratch = mkdtempSync(join(tmpdir(), 'stowage-encryption-bench-'));
const ctx = { quick: false, scratch, profileDir: arg('profile') ?? null, record: () => undefined, note: () => undefined };
const mbps = (ms: number): number => SIZE / 1e6 / (ms / 1000);
const load = (): string => execFileSync('uptime', { encoding: 'utf8' }).trim().replace(/^.*load/, 'load');

const keyFile = join(scratch, 'keys');
writeFileSync(keyFile, `bench ${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
const forge = await startForge();
const servers: Record<'on' | 'off', Stowage | null> = { on: null, off: null };
try {
  servers.off = await startStowage(ctx, forge, 'plain', { SVC_COMPRESSION: 'off', SVC_ENCRYPTION: 'off' });
  servers.on = await startStowage(ctx, forge, 'encrypted', { SVC_COMPRESSION: 'off', SVC_ENCRYPTION_KEY_FILE: keyFile, SVC_ENCRYPTION: 'on' });
  const src = new BigSource(ctx, SIZE, 'encryption-big');
  const up: Record<'on' | 'off', number[]> = { on: [], off: [] };
  const down: Record<'on' | 'off', number[]> = { on: [], off: [] };
  /** Server CPU seconds (all threads / main thread) per transfer. */
  const cpu: Record<string, string[]> = { 'up-on': [], 'up-off': [], 'down-on': [], 'down-off': [] };
  /** Peak VmRSS during each transfer over the server's idle figure at start, MiB. */
  const rss: Record<string, string[]> = { 'up-on': [], 'up-off': [], 'down-on': [], 'down-off': [] };
  const idle = { on: await idleRss(servers.on.pid), off: await idleRss(servers.off.pid) };
  const timed = async <T>(key: string, pid: number, f: () => Promise<T>): Promise<T> => {
    const [all0, main0] = [cpuSecondsOf(pid), mainThreadCpuSecondsOf(pid)];
    const peak = peakRssOver(pid);
    const r = await f();
    const top = await peak.stop();
    cpu[key]!.push(`${(cpuSecondsOf(pid) - all0).toFixed(2)}/${(mainThreadCpuSecondsOf(pid) - main0).toFixed(2)}`);
    rss[key]!.push(((top - idle[key.endsWith('-on') ? 'on' : 'off']) / MiB).toFixed(1));
    return r;
  };
  let lastOn = '';
  let lastOnRound = 0;
  let roundNo = 0;
  for (let r = 0; r < ROUNDS; r++) {
    for (const mode of r % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
      const s = servers[mode]!;
      const obj = src.round(++roundNo);
      process.stdout.write(`round ${r} ${mode}: ${load()}\n`);
      up[mode].push(mbps((await timed(`up-${mode}`, s.pid, () => uploadBig(s.client, obj.oid, obj.size, src.path))).ms));
      const [entry] = await s.client.batch('download', [{ oid: obj.oid, size: obj.size }]);
      const href = entry!.actions!.download!.href;
      await curlGet(href); // warm: the object file in the page cache
      down[mode].push(mbps((await timed(`down-${mode}`, s.pid, () => curlGet(href))).ms));
      if (mode === 'on') [lastOn, lastOnRound] = [obj.oid, roundNo];
    }
  }
  const med = (v: number[]): number => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
  const row = (what: string, v: Record<'on' | 'off', number[]>): string =>
    `${what.padEnd(22)} off ${v.off.map((x) => x.toFixed(0)).join('/')} MB/s, on ${v.on.map((x) => x.toFixed(0)).join('/')} MB/s; median on/off ${((med(v.on) / med(v.off)) * 100).toFixed(0)}%, per round ${v.on.map((x, i) => `${((x / v.off[i]!) * 100).toFixed(0)}%`).join(' ')}`;
  const mib = `${SIZE / MiB} MiB`;
  process.stdout.write(`${row(`${mib} upload (curl -T)`, up)}\n${row(`${mib} warm download`, down)}\n`);
  process.stdout.write(`server CPU s per transfer (all threads/main thread): ${Object.entries(cpu).map(([k, v]) => `${k} ${v.join(' ')}`).join('; ')}\n`);
  process.stdout.write(`server peak RSS per transfer over idle at start, MiB: ${Object.entries(rss).map(([k, v]) => `${k} ${v.join(' ')}`).join('; ')}\n`);

  // Small objects: 64 KiB each, one curl process PUTting them in turn. With encryption on the
  // journal keeps references only, so each upload is its own file and fsync (docs/encryption.md).
  const small: Record<'on' | 'off', number[]> = { on: [], off: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const mode of r % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
      const { dir, pairs } = await smallRound(ctx as never, servers[mode]!.client, () => Promise.resolve(), `small-${mode}-${r}`, SMALL);
      const config = join(dir, 'put.curlrc');
      writeFileSync(config, putConfig(pairs));
      const run = await checked(runClient(['curl', '--config', config]), SMALL);
      small[mode].push(SMALL / (run.ms / 1000));
    }
  }
  process.stdout.write(`${row(`${SMALL} x 64 KiB uploads, objects/s`, small).replace(/ MB\/s/g, '/s')}\n`);

  // The 1 MiB range from the middle, through curl, checked against the source's bytes.
  const start = SIZE / 2 + 12_345;
  const end = start + MiB - 1;
  const [entry] = await servers.on.client.batch('download', [{ oid: lastOn, size: SIZE }]);
  const out = join(scratch, 'range.bin');
  const range = await runClient(['curl', '-sS', '-u', USER, '-r', `${start}-${end}`, '-o', out, '-w', '%{http_code}', entry!.actions!.download!.href]);
  src.round(lastOnRound); // the source file as that object was
  const got = runCmp(out, src.path, start);
  process.stdout.write(`1 MiB Range read at ${start} via curl: status ${range.stdout}, ${range.ms.toFixed(1)} ms, bytes ${got} to the source\n`);
  process.stdout.write(`${await countedRange(servers.on.server.dataDir, lastOn, start, end)}\n`);
} finally {
  await servers.on?.stop();
  await servers.off?.stop();
  await forge.stop();
  rmSync(scratch, { recursive: true, force: true });
}

/** Whether the range file equals the source's bytes from `start`. */
function runCmp(range: string, source: string, start: number): string {
  try {
    execFileSync('cmp', ['-s', '-i', `0:${start}`, '-n', String(MiB), range, source]);
    return 'equal';
  } catch {
    return 'DIFFERENT';
  }
}

/** The range read in-process, over the server's data directory, counting the stored bytes the encrypting layer asks of the backend. */
async function countedRange(dataDir: string, oid: string, start: number, end: number): Promise<string> {
  const { DiskBlobStore } = await fromProduct<typeof import('../dist/src/store/disk.js')>('src/store/disk.js');
  const { EncryptingBlobStore } = await fromProduct<typeof import('../dist/src/store/layers/encrypt.js')>('src/store/layers/encrypt.js');
  const { ForwardingBlobStore } = await fromProduct<typeof import('../dist/src/store/layers/forwarding.js')>('src/store/layers/forwarding.js');
  const { KeyRing } = await fromProduct<typeof import('../dist/src/crypto/key-ring.js')>('src/crypto/key-ring.js');
  const { openSqliteIndex } = await fromProduct<typeof import('../dist/src/db/sqlite/sqlite-index.js')>('src/db/sqlite/sqlite-index.js');
  type Reader = import('../dist/src/store/types.js').BlobReader;
  type Oid = import('../dist/src/protocol/oid.js').Oid;
  let bytes = 0;
  class Counting extends ForwardingBlobStore {
    override async open(o: Oid): Promise<Reader | null> {
      const r = await this.inner.open(o);
      if (r === null) return null;
      return {
        size: r.size,
        storedSize: r.storedSize,
        framed: r.framed,
        read: (s: number, e: number) => ((bytes += e - s + 1), r.read(s, e)),
        readAt: (into: Uint8Array, p: number) => ((bytes += into.byteLength), r.readAt(into, p)),
        close: () => r.close(),
      };
    }
  }
  const index = openSqliteIndex(join(dataDir, 'index.sqlite'));
  try {
    const ring = KeyRing.parse((await import('node:fs')).readFileSync(keyFile, 'utf8'));
    const store = new EncryptingBlobStore(new Counting(await DiskBlobStore.open(dataDir, { directIo: false })), { keys: index.dataKeys, ring, encryptNew: true });
    const r = (await store.open(oid as Oid))!;
    const atOpen = bytes;
    const src = r.read(start, end);
    let got = 0;
    for (let c; (c = await src.next()) !== null; ) got += c.byteLength;
    await src.close();
    await r.close();
    return `1 MiB Range read in-process: ${got} bytes returned; stored bytes read (so decrypted): ${atOpen} at open (header and final frame) + ${bytes - atOpen} for the range (${((bytes - atOpen) / MiB).toFixed(3)} MiB)`;
  } finally {
    index.close();
  }
}

/**
 * Cache mode over a simulated WAN (docs/cache.md), run by hand:
 *
 *   npm run bench:build && node native-bench/dist/cache-wan.js [--files=1000] [--file-kib=64] [--big-mib=1024] [--herd=8] [--latency-ms=40] [--mbit=100]
 *
 * An upstream Stowage node reached only through a TCP proxy that holds each chunk `latency-ms`
 * each way and carries at most `mbit` each way (the suite's test/helpers/wan-proxy.ts), a cache
 * node on the local link in front of it. For a repository of `files` × `file-kib` KiB and one of a
 * `big-mib` MiB file: `git clone` straight from the upstream, through the cold cache, through the
 * warm cache (each a fresh clone), with the wall time and the object bytes over the upstream link;
 * then `herd` clones at once of a fresh small repository through the cold cache. Pushes go straight
 * to the upstream (not timed).
 */
import { randomFillSync } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GitHubEmulator, GitSandbox, fromProduct, startServer, tmpDir } from './lib/product.js';

const wan = await fromProduct<typeof import('../dist/test/helpers/wan-proxy.js')>('test/helpers/wan-proxy.js');

const arg = (name: string, fallback: number): number => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? fallback : Number(a.split('=')[1]);
};
const FILES = arg('files', 1000);
const FILE_KIB = arg('file-kib', 64);
const BIG_MIB = arg('big-mib', 1024);
const HERD = arg('herd', 8);
const LATENCY = arg('latency-ms', 40);
const MBIT = arg('mbit', 100);
const TOKEN = 'bench-cache-token';

const forge = new GitHubEmulator();
const repos = ['bench/small', 'bench/big', 'bench/herd'];
for (const r of repos) forge.repos.set(r, { private: true });
forge.tokens.set(TOKEN, { login: 'bench', repos: Object.fromEntries(repos.map((r) => [r, 'push'])) });
await forge.start();
const target = { host: '127.0.0.1', port: 0 };
const link = await wan.startWanProxy(target, { latencyMs: LATENCY, bitsPerSecond: MBIT * 1e6 });
const upstream = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_BASE_URL: `http://127.0.0.1:${link.port}` });
target.port = upstream.port;
const cache = await startServer({ SVC_UPSTREAM_LFS_URL: `http://127.0.0.1:${link.port}/{org}/{repo}`, SVC_CACHE_MAX_SIZE: `${BIG_MIB + 2 * FILES * FILE_KIB + 1024}MiB` });
const root = tmpDir('stowage-cache-bench-');
const sb = await GitSandbox.create(join(root, 'home'), cache.url, TOKEN);
writeFileSync(join(sb.home, '.git-credentials'), [cache.url, `http://127.0.0.1:${upstream.port}`, `http://127.0.0.1:${link.port}`].map((u) => `http://git:${TOKEN}@${new URL(u).host}`).join('\n') + '\n');
const direct = `http://127.0.0.1:${upstream.port}`;
const rows: string[] = [];

/** A repository of `count` random files of `bytes` each, pushed straight to the upstream (not over the link). */
async function pushed(name: string, count: number, bytes: number): Promise<string> {
  const dir = join(root, name.replace('/', '-'));
  const { remote, work } = await sb.newProject(dir, `${direct}/${name}`);
  const buf = Buffer.alloc(Math.min(bytes, 64 << 20));
  for (let i = 0; i < count; i++) {
    const path = join(work, `f${i}.bin`);
    writeFileSync(path, '');
    for (let left = bytes; left > 0; left -= buf.length) writeFileSync(path, randomFillSync(buf).subarray(0, Math.min(left, buf.length)), { flag: 'a' });
  }
  await sb.git(work, 'add', '.');
  await sb.git(work, 'commit', '-qm', 'assets');
  await sb.git(work, 'push', '-q', 'origin', 'main');
  rmSync(work, { recursive: true, force: true });
  return remote;
}

async function clone(label: string, remote: string, lfsUrl: string): Promise<void> {
  const dest = join(root, `clone-${rows.length}`);
  const bytes0 = link.bytesDown;
  const t0 = performance.now();
  await sb.git(root, '-c', `lfs.url=${lfsUrl}`, 'clone', '-q', remote, dest);
  const s = (performance.now() - t0) / 1000;
  rows.push(`| ${label} | ${s.toFixed(2)} s | ${((link.bytesDown - bytes0) / 2 ** 20).toFixed(1)} MiB |`);
  process.stdout.write(`${rows.at(-1)}\n`);
  rmSync(dest, { recursive: true, force: true });
}

try {
  mkdirSync(root, { recursive: true });
  process.stdout.write(`WAN: ${LATENCY} ms each way, ${MBIT} Mbit/s each way\n| clone | wall | bytes over the upstream link |\n|---|---|---|\n`);
  const small = await pushed('bench/small', FILES, FILE_KIB * 1024);
  for (const [label, url] of [['straight', `http://127.0.0.1:${link.port}`], ['cold cache', cache.url], ['warm cache', cache.url]] as const) {
    await clone(`${FILES} × ${FILE_KIB} KiB, ${label}`, small, `${url}/bench/small`);
  }
  if (BIG_MIB > 0) {
    const big = await pushed('bench/big', 1, BIG_MIB << 20);
    for (const [label, url] of [['straight', `http://127.0.0.1:${link.port}`], ['cold cache', cache.url], ['warm cache', cache.url]] as const) {
      await clone(`1 × ${BIG_MIB} MiB, ${label}`, big, `${url}/bench/big`);
    }
  }
  if (HERD > 0) {
    const herd = await pushed('bench/herd', FILES, FILE_KIB * 1024);
    const bytes0 = link.bytesDown;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: HERD }, (_, i) => sb.git(root, '-c', `lfs.url=${cache.url}/bench/herd`, 'clone', '-q', herd, join(root, `herd-${i}`))));
    const s = (performance.now() - t0) / 1000;
    process.stdout.write(`| ${HERD} clones at once of ${FILES} × ${FILE_KIB} KiB, cold cache | ${s.toFixed(2)} s | ${((link.bytesDown - bytes0) / 2 ** 20).toFixed(1)} MiB |\n`);
  }
} finally {
  await cache.stop();
  await upstream.stop();
  await link.close();
  await forge.stop();
  rmSync(root, { recursive: true, force: true });
}

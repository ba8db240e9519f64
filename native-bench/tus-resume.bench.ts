/**
 * What a dropped connection costs a push with resumable uploads: the real git-lfs
 * (lfs.tustransfers=true) pushes one 1 GB object to one node (disk store) through the product's
 * cutting TCP proxy, uninterrupted and cut once at 25, 50 and 75% of the object; each push to a
 * fresh repository, so every case starts from nothing. Prints, per case, the bytes that reached
 * the server (all connections) and the push's wall time, beside the uninterrupted push.
 *
 *   npm run bench:build && flock /work/bench.lock node native-bench/dist/tus-resume.bench.js [bytes]
 */
import { spawn } from 'node:child_process';
import { linkSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fromProduct, GitHubEmulator, GitSandbox, startServer, tmpDir } from './lib/product.js';

const { startFaultProxy } = await fromProduct<typeof import('../dist/test/helpers/fault-proxy.js')>('test/helpers/fault-proxy.js');
const { writeRandomFile } = await fromProduct<typeof import('../dist/test/helpers/data.js')>('test/helpers/data.js');

const SIZE = Number(process.argv[2] ?? 1_000_000_000);
const CUTS: readonly (number | null)[] = [null, 0.25, 0.5, 0.75];

const forge = new GitHubEmulator();
await forge.start();
const repos = CUTS.map((c) => `bench/tus-${c === null ? 'whole' : Math.round(c * 100)}`);
for (const r of repos) forge.repos.set(r, { private: true });
forge.tokens.set('tok', { login: 'bench', repos: Object.fromEntries(repos.map((r) => [r, 'push'])) });

const proxy = await startFaultProxy({ host: '127.0.0.1', port: 9 });
const base = `http://127.0.0.1:${proxy.port}`;
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_TUS_PORT: '0', SVC_BASE_URL: base });
const listening = await server.waitForLog((ev) => ev.msg === 'listening', 'listening');
proxy.retarget('127.0.0.1', listening.tus_port as number);

const root = tmpDir('stowage-bench-tus-');
const sb = await GitSandbox.create(join(root, 'home'), base, 'tok');
await sb.git(sb.home, 'config', '--global', 'lfs.tustransfers', 'true');
const big = join(root, 'big.bin');
await writeRandomFile(big, SIZE);

const rows: string[] = [];
try {
  for (const [i, cut] of CUTS.entries()) {
    const { work } = await sb.newProject(join(root, `p${i}`), `${base}/${repos[i]}`);
    linkSync(big, join(work, 'big.bin'));
    await sb.git(work, 'add', '.');
    await sb.git(work, 'commit', '-qm', 'big');
    const start = proxy.bytesUp;
    if (cut !== null) proxy.cutAt(start + Math.floor(SIZE * cut));
    const t0 = performance.now();
    const push = spawn('git', ['push', '-q', 'origin', 'main'], { cwd: work, env: sb.env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    push.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => push.once('close', resolve));
    const seconds = (performance.now() - t0) / 1000;
    if (code !== 0) throw new Error(`push ${repos[i]} failed: ${stderr}`);
    const sent = proxy.bytesUp - start;
    rows.push(`| ${cut === null ? 'uninterrupted' : `cut at ${cut * 100}%`} | ${sent} | ${((sent / SIZE) * 100).toFixed(1)}% | ${seconds.toFixed(1)} s |`);
  }
} finally {
  await server.stop();
  await proxy.close();
  await forge.stop();
  rmSync(root, { recursive: true, force: true });
}
console.log(`git-lfs tus push of one ${SIZE}-byte object, one node (disk store), through a proxy that cuts once\n`);
console.log('| push | bytes received by the server | of the object | wall time |\n|---|---|---|---|');
for (const r of rows) console.log(r);

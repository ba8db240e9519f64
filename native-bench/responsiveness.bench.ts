/**
 * Issue 5's responsiveness figure: while a 1 GiB compressed upload and an audit run, how fast do
 * `GET /health` and a 100-object batch answer? Prints p50/p99 idle and under that load.
 *
 *   npm run build && node native-bench/dist/responsiveness.bench.js [--size-mib=1024]
 */
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { textLike } from './lib/data-gen.js';
import { GitHubEmulator, startServer, tmpDir } from './lib/product.js';
import { percentile } from './lib/stats.js';

const here = dirname(fileURLToPath(import.meta.url));
const REPO = 'bench/responsive';
const TOKEN = 'bench-admin';
const AUTH = `Basic ${Buffer.from(`bench:${TOKEN}`).toString('base64')}`;
const LFS = 'application/vnd.git-lfs+json';
const MiB = 1 << 20;

/** Sequential requests until `until()` is true; returns the latency of each, sorted. */
async function probe(fn: () => Promise<void>, until: () => boolean): Promise<number[]> {
  const out: number[] = [];
  while (!until()) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return out.sort((a, b) => a - b);
}

async function main(): Promise<void> {
  const sizeMiB = Number(/--size-mib=(\d+)/.exec(process.argv.join(' '))?.[1] ?? 1024);
  const forge = new GitHubEmulator();
  forge.repos.set(REPO, { private: true });
  forge.tokens.set(TOKEN, { login: 'bench', repos: { [REPO]: 'admin' } });
  await forge.start();
  const dataDir = tmpDir('stowage-responsive-');
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd:3' }, { dataDir });
  const agent = new Agent({ connections: 4 });
  const base = `${server.url}/${REPO}/objects`;
  let uploader: ChildProcessByStdio<Writable, Readable, null> | null = null;
  try {
    // The upload runs in a process of its own (see responsive-uploader.ts); it builds its body
    // before anything is timed.
    uploader = spawn(process.execPath, [join(here, 'responsive-uploader.js'), base, AUTH, String(sizeMiB)], { stdio: ['pipe', 'pipe', 'inherit'] });
    const child = uploader;
    const uploaderLines = createInterface({ input: child.stdout });
    const nextLine = (): Promise<string> =>
      new Promise((resolve, reject) => {
        uploaderLines.once('line', resolve);
        child.once('exit', (code) => reject(new Error(`uploader exited with ${code}`)));
      });
    await nextLine(); // ready
    // Something to audit: 16 compressed objects of 64 MiB of text-like data.
    const seeded: Buffer[] = [];
    for (let i = 0; i < 16; i++) seeded.push(textLike(64 * MiB, 100 + i));
    for (const data of seeded) {
      const oid = createHash('sha256').update(data).digest('hex');
      const r = await request(`${base}/${oid}`, { method: 'PUT', dispatcher: agent, headers: { authorization: AUTH }, body: data });
      await r.body.text();
      if (r.statusCode !== 200) throw new Error(`seeding PUT ${r.statusCode}`);
    }
    const batchBody = JSON.stringify({
      operation: 'download',
      objects: Array.from({ length: 100 }, (_, i) => ({ oid: createHash('sha256').update(`absent ${i}`).digest('hex'), size: 1000 + i })),
    });
    const health = async (): Promise<void> => void (await (await request(`${server.url}/health`, { dispatcher: agent })).body.text());
    const batch = async (): Promise<void> => {
      const r = await request(`${base}/batch`, { method: 'POST', dispatcher: agent, headers: { authorization: AUTH, 'content-type': LFS, accept: LFS }, body: batchBody });
      await r.body.text();
    };

    const idleUntil = performance.now() + 3000;
    const [idleHealth, idleBatch] = await Promise.all([probe(health, () => performance.now() > idleUntil), probe(batch, () => performance.now() > idleUntil)]);

    let busy = 2;
    const t0 = performance.now();
    const uploading = (async () => {
      const done = nextLine();
      child.stdin.write('go\n');
      const { ms } = JSON.parse(await done) as { ms: number };
      busy--;
      return ms;
    })();
    const auditing = (async () => {
      const r = await request(`${base}/audit`, { method: 'POST', dispatcher: agent, headers: { authorization: AUTH, 'content-type': LFS, accept: LFS }, body: '{}' });
      const report = await r.body.text();
      if (r.statusCode !== 200) throw new Error(`audit ${r.statusCode} ${report}`);
      busy--;
      return performance.now() - t0;
    })();
    // Either failing ends the probes too; its error is reported below.
    uploading.catch(() => (busy = 0));
    auditing.catch(() => (busy = 0));
    const [loadHealth, loadBatch] = await Promise.all([probe(health, () => busy === 0), probe(batch, () => busy === 0)]);
    const [uploadMs, auditMs] = await Promise.all([uploading, auditing]);

    const line = (name: string, idle: number[], load: number[]): string =>
      `| ${name} | ${percentile(idle, 50).toFixed(2)} / ${percentile(idle, 99).toFixed(2)} ms (n=${idle.length}) | ${percentile(load, 50).toFixed(2)} / ${percentile(load, 99).toFixed(2)} ms (n=${load.length}) |`;
    process.stdout.write(
      [
        `Responsiveness while a ${sizeMiB} MiB zstd:3 upload (${(uploadMs / 1000).toFixed(1)} s) and an audit of 1 GiB (${(auditMs / 1000).toFixed(1)} s) run:`,
        '',
        '| Request | idle p50 / p99 | under load p50 / p99 |',
        '|---|---|---|',
        line('GET /health', idleHealth, loadHealth),
        line('batch of 100 objects', idleBatch, loadBatch),
        '',
      ].join('\n'),
    );
  } catch (e) {
    process.stderr.write(`failed: ${String(e)}\nserver log tail:\n${server.logs.slice(-8).join('\n')}\n`);
    throw e;
  } finally {
    uploader?.kill();
    await agent.close();
    await server.stop();
    await forge.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});

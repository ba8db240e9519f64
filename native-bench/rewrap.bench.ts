/**
 * Key rotation's cost: `rewrap` of 10,000 objects. A server with encryption on (key k1) takes
 * 10,000 objects of 1 KiB; it restarts with k2 put first; then one rewrap job, timed from the POST
 * to its report. What it wrote: the job's own count of object bytes, the object files before and
 * after (sizes and modification times, all equal when none was rewritten), and the server process's
 * bytes written to disk meanwhile (/proc/PID/io write_bytes: the index's pages and WAL, no object).
 *
 *   npm run bench:build && flock /work/bench.lock node native-bench/dist/rewrap.bench.js [--n=10000]
 */
import { randomBytes, createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { LfsClient } from './lib/lfs-client.js';
import { GitHubEmulator, startServer, type RunningServer } from './lib/product.js';

const N = Number(/^--n=(\d+)$/.exec(process.argv.find((a) => a.startsWith('--n=')) ?? '')?.[1] ?? 10_000);
const PARALLEL = 8;
const SIZE = 1024;
const REPO = 'bench/vault';
const ADMIN = 'bench-admin-token';

/** Every file of the objects tree: path → "size mtime". */
function objectTree(dataDir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const e of readdirSync(join(dataDir, 'objects'), { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    const s = statSync(p);
    out.set(p, `${s.size} ${s.mtimeMs}`);
  }
  return out;
}

/** Bytes this process has caused to be written to storage (/proc/PID/io). */
function writeBytes(pid: number): number {
  return Number(/^write_bytes: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))?.[1] ?? NaN);
}

const scratch = mkdtempSync(join(tmpdir(), 'stowage-rewrap-bench-'));
const keyFile = join(scratch, 'keys');
const dataDir = join(scratch, 'data');
const k1 = `k1 ${randomBytes(32).toString('base64')}`;
const k2 = `k2 ${randomBytes(32).toString('base64')}`;
const forge = new GitHubEmulator();
forge.repos.set(REPO, { private: true });
forge.tokens.set(ADMIN, { login: 'ops', siteAdmin: true, repos: { [REPO]: 'admin' } });
await forge.start();
let server: RunningServer | null = null;
try {
  writeFileSync(keyFile, `${k1}\n`, { mode: 0o600 });
  const env = { SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: forge.url, SVC_ENCRYPTION_KEY_FILE: keyFile };
  server = await startServer(env, { dataDir });
  const client = new LfsClient(server.url, REPO, ADMIN, PARALLEL);
  let next = 0;
  await Promise.all(
    Array.from({ length: PARALLEL }, async () => {
      while (next < N) {
        const body = randomBytes(SIZE);
        next++;
        await client.upload(createHash('sha256').update(body).digest('hex'), SIZE, () => body);
      }
    }),
  );
  await client.close();
  // Small objects go into the journal first (sealed under their segment's key, not in data_keys):
  // wait for it to write them to their own files, so each has its data key row to rewrap.
  while (objectTree(dataDir).size < N) await new Promise((r) => setTimeout(r, 200));
  await server.stop();
  writeFileSync(keyFile, `${k2}\n${k1}\n`, { mode: 0o600 });
  server = await startServer(env, { dataDir });
  const pid = server.child.pid!;
  const before = objectTree(dataDir);
  const written0 = writeBytes(pid);
  const t0 = process.hrtime.bigint();
  const res = await request(`${server.url}/-/objects/rewrap`, {
    method: 'POST',
    headers: { authorization: `Basic ${Buffer.from(`ops:${ADMIN}`).toString('base64')}`, 'content-type': 'application/json' },
    body: '{}',
  });
  const report = (await res.body.json()) as Record<string, unknown>;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const written = writeBytes(pid) - written0;
  const after = objectTree(dataDir);
  const unchanged = [...before].filter(([p, v]) => after.get(p) === v).length;
  const lines = [
    `rewrap of ${N} objects (${SIZE} B each), SVC_REWRAP_BATCH default`,
    `  status ${res.statusCode}, outcome ${String(report.outcome)}, rewrapped ${String(report.rewrapped)} of ${String(report.data_keys)} data keys`,
    `  time            ${seconds.toFixed(2)} s (${(Number(report.rewrapped) / seconds).toFixed(0)} data keys/s)`,
    `  object bytes    ${String(report.object_bytes_written)} written (job report)`,
    `  object files    ${unchanged} of ${before.size} unchanged (size and mtime), ${after.size} after`,
    `  process writes  ${written} bytes to disk during the job (index pages and WAL: ${(written / Math.max(1, Number(report.rewrapped))).toFixed(0)} B per data key)`,
    `  keys in use     ${JSON.stringify(report.keys_in_use)}, retirable ${JSON.stringify(report.retirable_keys)}`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  await server?.stop();
  await forge.stop();
  rmSync(scratch, { recursive: true, force: true });
}

import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, http } from '../helpers/lfs-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// The HTTP thread stays responsive while an audit runs (measured, not assumed): p99 of
// GET /health, of batch and of 2 MiB uploads, idle and during back-to-back audits of ≥ 2 GiB, and
// the audit's throughput on cached data. Figures are reported (t.comment), not asserted: they
// depend on the machine. STOWAGE_LOAD_GIB sets the audited size (default 2).

const GiB = 1024 ** 3;
const MiB = 1 << 20;
const TOTAL = Math.round(Number(process.env.STOWAGE_LOAD_GIB ?? '2') * GiB);
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/big', { private: true });
forge.repos.set('acme/busy', { private: true });
forge.tokens.set('tok', { login: 'boss', repos: { 'acme/big': 'admin', 'acme/busy': 'admin' } });
const auth = { authorization: basic('tok') };
const dataDir = tmpDir();
t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url }, { dataDir });
t.teardown(() => server.stop());

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const post = (kind: string, body: object) =>
  http('POST', `${server.url}/acme/big/objects/${kind}`, { headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });

function p99(ms: number[]): number {
  const s = [...ms].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] ?? NaN;
}
const fmt = (ms: number[]): string => `p50 ${[...ms].sort((a, b) => a - b)[Math.floor(ms.length / 2)]!.toFixed(2)} ms, p99 ${p99(ms).toFixed(2)} ms (n=${ms.length})`;

/** Health, batch and upload latencies measured in parallel loops until `until()` is false. */
async function measure(until: () => boolean): Promise<{ health: number[]; batch: number[]; upload: number[]; failures: number }> {
  const health: number[] = [];
  const batch: number[] = [];
  const upload: number[] = [];
  let failures = 0;
  const timed = async (into: number[], f: () => Promise<number>): Promise<void> => {
    const t0 = performance.now();
    const status = await f();
    into.push(performance.now() - t0);
    if (status !== 200) failures++;
  };
  const loops = [
    (async () => {
      while (until()) {
        await timed(health, async () => (await http('GET', `${server.url}/health`)).status);
        await new Promise((r) => setTimeout(r, 5));
      }
    })(),
    (async () => {
      while (until()) {
        const objects = Array.from({ length: 20 }, () => ({ oid: sha(randomBytes(8)), size: 1234 }));
        await timed(batch, async () => {
          const r = await http('POST', `${server.url}/acme/busy/objects/batch`, {
            headers: { ...auth, 'content-type': LFS, accept: LFS },
            body: JSON.stringify({ operation: 'upload', objects }),
          });
          return r.status;
        });
        await new Promise((r) => setTimeout(r, 10));
      }
    })(),
    (async () => {
      while (until()) {
        const data = randomBytes(2 * MiB);
        await timed(upload, async () => (await http('PUT', `${server.url}/acme/busy/objects/${sha(data)}`, { headers: auth, body: data })).status);
      }
    })(),
  ];
  await Promise.all(loops);
  return { health, batch, upload, failures };
}

t.test(`p99 latency idle and during audits of ${(TOTAL / GiB).toFixed(1)} GiB; audit throughput`, async (t) => {
  // A copied legacy folder is the quickest way to get gigabytes in: dedupe folds (and hashes) it.
  const block = randomBytes(64 * MiB);
  let written = 0;
  for (let i = 0; written < TOTAL; i++) {
    block.writeUInt32LE(i, 0);
    const oid = sha(block);
    const dir = join(dataDir, 'repos', 'acme', 'big', oid.slice(0, 2), oid.slice(2, 4));
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, oid), block);
    written += block.length;
  }
  const t0 = performance.now();
  const folded = (await post('dedupe', {})).json();
  const dedupeS = (performance.now() - t0) / 1000;
  t.equal(folded.refused, 0);
  t.comment(`dedupe of ${(written / GiB).toFixed(2)} GiB (${folded.folded} files): ${dedupeS.toFixed(2)} s, ${(written / 1e9 / dedupeS).toFixed(2)} GB/s`);

  const idleEnd = Date.now() + 8000;
  const idle = await measure(() => Date.now() < idleEnd);
  t.equal(idle.failures, 0);

  // Audits back to back while the same load runs; the first one also warms the page cache.
  const warm = (await post('audit', {})).json();
  t.equal(warm.complete, true);
  let audits = 0;
  let auditBytes = 0;
  let auditMs = 0;
  let running = true;
  const auditor = (async () => {
    const end = Date.now() + 12000;
    while (Date.now() < end) {
      const a0 = performance.now();
      const r = (await post('audit', {})).json();
      auditMs += performance.now() - a0;
      auditBytes += r.bytes;
      audits++;
      if (!r.complete || r.corrupt + r.unreadable > 0) t.fail('an audit under load reported a problem');
    }
    running = false;
  })();
  const busy = await measure(() => running);
  await auditor;
  t.equal(busy.failures, 0, 'every request under load succeeded');

  const quiet0 = performance.now();
  const quiet = (await post('audit', {})).json();
  const quietS = (performance.now() - quiet0) / 1000;
  t.comment(`GET /health  idle: ${fmt(idle.health)}; during audit: ${fmt(busy.health)}; ratio p99 ${(p99(busy.health) / p99(idle.health)).toFixed(2)}`);
  t.comment(`batch (20)   idle: ${fmt(idle.batch)}; during audit: ${fmt(busy.batch)}; ratio p99 ${(p99(busy.batch) / p99(idle.batch)).toFixed(2)}`);
  t.comment(`PUT 2 MiB    idle: ${fmt(idle.upload)}; during audit: ${fmt(busy.upload)}; ratio p99 ${(p99(busy.upload) / p99(idle.upload)).toFixed(2)}`);
  t.comment(`audit under load: ${audits} runs, ${(auditBytes / 1e9 / (auditMs / 1000)).toFixed(2)} GB/s verified`);
  t.comment(`audit alone, cached: ${(quiet.bytes / GiB).toFixed(2)} GiB in ${quietS.toFixed(2)} s = ${(quiet.bytes / 1e9 / quietS).toFixed(2)} GB/s verified`);
  t.ok(audits >= 1 && quiet.complete);
});

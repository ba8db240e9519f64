/**
 * The index's share of a small upload, SQLite against PostgreSQL: the calls one upload makes on a
 * cluster node outside a retain sweep (its batch lookup, then its reference with the checks an
 * upload's commit carries: sweeps, the access settings it was admitted by), for 1000 uploads at 8
 * at once, as 8 parallel clients would. Reports ms per upload (wall time / uploads) and per-call latency.
 *
 *   npm run bench:build && flock /work/bench.lock node native-bench/dist/index-calls.bench.js
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fromProduct } from './lib/product.js';
import { median } from './lib/stats.js';

type Index = import('../dist/src/db/index-types.js').Index;
type Oid = import('../dist/src/protocol/oid.js').Oid;
const { PostgresIndex } = await fromProduct<typeof import('../dist/src/db/postgres/postgres-index.js')>('src/db/postgres/postgres-index.js');
const { openSqliteIndex } = await fromProduct<typeof import('../dist/src/db/sqlite/sqlite-index.js')>('src/db/sqlite/sqlite-index.js');
const { parseOid } = await fromProduct<typeof import('../dist/src/protocol/oid.js')>('src/protocol/oid.js');
const { startPostgres } = await fromProduct<typeof import('../dist/test/helpers/postgres.js')>('test/helpers/postgres.js');

const UPLOADS = 1000;
const PARALLEL = 8;
const ROUNDS = 3;

const oid = (s: string): Oid => parseOid(createHash('sha256').update(s).digest('hex'))!;

/** This process's CPU per upload in the last run (ms): the client's share, beside the database's. */
const cpuPerUpload: Record<string, number[]> = { sqlite: [], postgres: [] };

/** ms per upload for UPLOADS uploads' index calls, PARALLEL at a time. */
async function run(ix: Index, label: string): Promise<number> {
  const cpu0 = process.cpuUsage();
  await ix.nodes.heartbeat('bench', Date.now(), 0, 0);
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: PARALLEL }, async () => {
      while (next < UPLOADS) {
        const o = oid(`${label}/${next++}`);
        await ix.objects.findManyInRepo('bench/repo', [o]);
        await ix.objects.addReference('bench/repo', o, 65536, 65536, { storedVerified: true, ticket: null, ackedSweep: 0, setting: { key: 'access', value: null } });
      }
    }),
  );
  const cpu = process.cpuUsage(cpu0);
  cpuPerUpload[ix.kind]!.push((cpu.user + cpu.system) / 1000 / UPLOADS);
  return Number(process.hrtime.bigint() - t0) / 1e6 / UPLOADS;
}


const teardowns: (() => Promise<void>)[] = [];
const scratch = mkdtempSync(join(tmpdir(), 'stowage-index-bench-'));
try {
  const pg = await startPostgres((fn) => teardowns.push(fn));
  const results: Record<string, number[]> = { sqlite: [], postgres: [] };
  for (let r = 0; r < ROUNDS; r++) {
    const sqlite = openSqliteIndex(join(scratch, `r${r}.sqlite`));
    results.sqlite!.push(await run(sqlite, `s${r}`));
    await sqlite.close();
    const postgres = await PostgresIndex.open(await pg.createDatabase());
    results.postgres!.push(await run(postgres, `p${r}`));
    await postgres.close();
  }
  const s = median(results.sqlite!);
  const p = median(results.postgres!);
  console.log(`index calls per small upload (${UPLOADS} uploads, ${PARALLEL} at once, median of ${ROUNDS}):`);
  const cpu = (k: string): string => median(cpuPerUpload[k]!).toFixed(3);
  console.log(`  sqlite   ${s.toFixed(3)} ms/upload (Node CPU ${cpu('sqlite')} ms/upload)`);
  console.log(`  postgres ${p.toFixed(3)} ms/upload (Node CPU ${cpu('postgres')} ms/upload; +${(p - s).toFixed(3)} ms; the throwaway server runs with fsync off)`);
  console.log(`  load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} on ${availableParallelism()} cores`);
} finally {
  for (const fn of teardowns) await fn();
  rmSync(scratch, { recursive: true, force: true });
}

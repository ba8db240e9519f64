/**
 * The two PostgreSQL clients for Node side by side, on what the index does: sequential round trips
 * (a primary-key select, an insert … RETURNING), throughput of 8 concurrent callers over a pool of
 * 8, all with named prepared statements; the RSS each adds to a process; its install size.
 *
 *   npm install --no-save pg postgres     # the one not chosen is not a dependency
 *   npm run bench:build && flock /work/bench.lock node native-bench/dist/pg-clients.js
 *
 * Each client runs in a child process of its own (so RSS is its own) against a throwaway local
 * PostgreSQL (test/helpers/postgres.ts). Results are medians of ROUNDS runs.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fromProduct } from './lib/product.js';
import { median } from './lib/stats.js';

const { startPostgres } = await fromProduct<typeof import('../dist/test/helpers/postgres.js')>('test/helpers/postgres.js');

const N = 4000;
const CONCURRENT = 8;
const ROUNDS = 5;

type Client = 'pg' | 'postgres';

interface Figures {
  selectUs: number;
  insertUs: number;
  concurrentOps: number;
  rssBaseMb: number;
  rssMb: number;
}

/** A tiny common face over both clients: one pooled `query(name, text, values)`. */
interface Runner {
  query(name: string, text: string, values: unknown[]): Promise<unknown[]>;
  end(): Promise<void>;
}

async function runner(client: Client, url: string): Promise<Runner> {
  const spec: string = client; // a string, so the compiler does not need the other client installed
  if (client === 'pg') {
    const pg = (await import(spec)) as { default: { Pool: new (o: object) => { query(q: object): Promise<{ rows: unknown[] }>; end(): Promise<void> } } };
    const pool = new pg.default.Pool({ connectionString: url, max: CONCURRENT });
    return {
      query: async (name, text, values) => (await pool.query({ name, text, values })).rows,
      end: () => pool.end(),
    };
  }
  const mod = (await import(spec)) as { default: (url: string, o: object) => { unsafe(q: string, v: unknown[], o: object): Promise<unknown[]>; end(): Promise<void> } };
  const sql = mod.default(url, { max: CONCURRENT, prepare: true, onnotice: () => undefined });
  return {
    // unsafe() with prepare: true is a named prepared statement per distinct text, as tagged templates are.
    query: (_name, text, values) => sql.unsafe(text, values, { prepare: true }),
    end: () => sql.end(),
  };
}

async function measure(client: Client, url: string): Promise<Figures> {
  const rssBaseMb = process.memoryUsage().rss / 2 ** 20;
  const db = await runner(client, url);
  const table = `b_${client}`;
  await db.query(`d_${client}`, `DROP TABLE IF EXISTS ${table}`, []);
  await db.query(`c_${client}`, `CREATE TABLE ${table} (oid TEXT PRIMARY KEY, size BIGINT NOT NULL)`, []);
  const insert = `INSERT INTO ${table} (oid, size) VALUES ($1, $2) RETURNING size`;
  const select = `SELECT size FROM ${table} WHERE oid = $1`;
  let t = process.hrtime.bigint();
  for (let i = 0; i < N; i++) await db.query('ins', insert, [`oid-${i}`, i]);
  const insertUs = Number(process.hrtime.bigint() - t) / 1000 / N;
  t = process.hrtime.bigint();
  for (let i = 0; i < N; i++) await db.query('sel', select, [`oid-${i % N}`]);
  const selectUs = Number(process.hrtime.bigint() - t) / 1000 / N;
  t = process.hrtime.bigint();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENT }, async () => {
      while (next < N * 2) {
        const i = next++;
        await db.query('sel', select, [`oid-${i % N}`]);
      }
    }),
  );
  const concurrentOps = (N * 2) / (Number(process.hrtime.bigint() - t) / 1e9);
  const rssMb = process.memoryUsage().rss / 2 ** 20;
  await db.end();
  return { selectUs, insertUs, concurrentOps, rssBaseMb, rssMb };
}

/** Bytes on disk of a package and everything it depends on (its install size), from node_modules. */
function installKb(pkg: string, seen = new Set<string>()): number {
  if (seen.has(pkg)) return 0;
  seen.add(pkg);
  const dir = join('node_modules', pkg);
  if (!existsSync(dir)) return 0;
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
  let kb = duKb(dir);
  for (const dep of Object.keys(manifest.dependencies ?? {})) kb += installKb(dep, seen);
  return kb;
}

function duKb(path: string): number {
  const st = statSync(path);
  if (!st.isDirectory()) return Math.ceil(st.size / 1024);
  return readdirSync(path).reduce((kb, e) => (e === 'node_modules' ? kb : kb + duKb(join(path, e))), 0);
}


async function main(): Promise<void> {
  const [, , role, client, url] = process.argv;
  if (role === '--child') {
    process.stdout.write(JSON.stringify(await measure(client as Client, url!)));
    return;
  }
  const teardowns: (() => Promise<void>)[] = [];
  const pg = await startPostgres((fn) => teardowns.push(fn));
  try {
    const lines = ['| client | select µs | insert…RETURNING µs | 8-way selects/s | RSS added (MB) | install (kB) |', '|---|---|---|---|---|---|'];
    for (const client of ['pg', 'postgres'] as const) {
      const runs: Figures[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const url = await pg.createDatabase();
        const out = await new Promise<string>((resolve, reject) => {
          const c = spawn(process.execPath, [process.argv[1]!, '--child', client, url], { stdio: ['ignore', 'pipe', 'inherit'] });
          let s = '';
          c.stdout.on('data', (d: Buffer) => (s += d));
          c.once('exit', (code) => (code === 0 ? resolve(s) : reject(new Error(`${client} run exited ${code}`))));
        });
        runs.push(JSON.parse(out) as Figures);
      }
      lines.push(
        `| ${client} | ${median(runs.map((f) => f.selectUs)).toFixed(0)} | ${median(runs.map((f) => f.insertUs)).toFixed(0)} | ` +
          `${median(runs.map((f) => f.concurrentOps)).toFixed(0)} | ${median(runs.map((f) => f.rssMb - f.rssBaseMb)).toFixed(1)} | ${installKb(client)} |`,
      );
    }
    console.log(lines.join('\n'));
  } finally {
    for (const fn of teardowns) await fn();
  }
}

await main();

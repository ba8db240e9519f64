/**
 * Scale-out as curl sees it: the same two loads (1000 × 64 KiB uploads from 8 curl processes at
 * once, and one 1 GiB upload) against one node on SQLite + disk, one node on SQLite + S3 and one on
 * PostgreSQL + S3 (s3rver; neither keeps a journal, so the pair differs by the index alone), and
 * three nodes on PostgreSQL + S3 behind nginx (deploy/nginx/stowage.conf, plain HTTP so that TLS
 * is not in the figure). Every setup runs for the whole section and the rounds take turns (the order turns
 * too), so a slow minute of the shared machine falls on all of them alike. Batches go through
 * undici, every object byte through curl.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchContext } from './lib/context.js';
import { BigSource, parallelPuts, smallRound, uploadBig } from './lib/curl.js';
import { GiB, MiB } from './lib/data-gen.js';
import { LfsClient } from './lib/lfs-client.js';
import { cpuSecondsOf, watchServer } from './lib/proc-stats.js';
import { fromProduct, type GitHubEmulator } from './lib/product.js';
import { fmt, type Comparison } from './lib/report.js';
import { mbps, median } from './lib/stats.js';
import { journalRetired, REPO, startStowage, TOKEN } from './lib/stowage.js';

const { startCluster } = await fromProduct<typeof import('../dist/test/helpers/cluster.js')>('test/helpers/cluster.js');
const { startPostgres } = await fromProduct<typeof import('../dist/test/helpers/postgres.js')>('test/helpers/postgres.js');
const { startS3Server } = await fromProduct<typeof import('../dist/test/helpers/s3-server.js')>('test/helpers/s3-server.js');
type S3Server = import('../dist/test/helpers/s3-server.js').S3Server;

/**
 * Narrowing for A/B work (the full section runs without them): BENCH_CLUSTER_SETUPS=sqlite-s3,pg-s3
 * runs only those setups, BENCH_CLUSTER_ROUNDS=N that many rounds, BENCH_CLUSTER_BIG=0 skips the 1 GiB upload.
 */
const SETUPS = process.env.BENCH_CLUSTER_SETUPS?.split(',').filter(Boolean) ?? null;
const ROUNDS = Number(process.env.BENCH_CLUSTER_ROUNDS ?? '0');
const BIG = process.env.BENCH_CLUSTER_BIG !== '0';

/** One setup under test: where its clients go and the node processes that serve them. */
interface Setup {
  readonly key: string;
  readonly label: string;
  readonly client: LfsClient;
  readonly pids: () => number[];
  /** Waits out background work the previous round left (journal retirement on disk). */
  settled(): Promise<unknown>;
  stop(): Promise<void>;
}

/** One timed round: its figure, wall time, the nodes' CPU and the load around it. */
interface Round {
  readonly value: number;
  readonly ms: number;
  readonly nodeCpuS: number;
  readonly load: readonly [number, number];
}

/** Journal retirement of every disk data dir given (PostgreSQL nodes keep no journal: nothing to wait for). */
const journalsRetired = async (dirs: string[]): Promise<void> => {
  for (const d of dirs) if (existsSync(join(d, 'journal')) && readdirSync(join(d, 'journal')).length > 0) await journalRetired(d);
};

/** Times `run` with the nodes' CPU (all their threads, from /proc) and the 1-minute load around it. */
async function timed(setup: Setup, run: () => Promise<{ ms: number }>, value: (ms: number) => number): Promise<Round> {
  // The previous round's writes (a 1 GiB object in s3rver's files) go to disk now, not during this one.
  spawnSync('sync');
  const pids = setup.pids();
  const cpu0 = pids.reduce((a, p) => a + cpuSecondsOf(p), 0);
  const span = watchServer(pids[0]!);
  const r = await run();
  const end = span();
  return { value: value(r.ms), ms: r.ms, nodeCpuS: pids.reduce((a, p) => a + cpuSecondsOf(p), 0) - cpu0, load: end.load };
}

/** Starts every setup; the databases, the bucket and nginx are stopped by `stop` of the setup that made them. */
async function startSetups(ctx: BenchContext, forge: GitHubEmulator, s3: S3Server, newDatabase: () => Promise<string>): Promise<Setup[]> {
  const one = async (key: string, label: string, extra: Record<string, string>): Promise<Setup> => {
    const s = await startStowage(ctx, forge, key, extra);
    return { key, label, client: s.client, pids: () => [s.pid], settled: () => journalsRetired([s.server.dataDir]), stop: () => s.stop() };
  };
  const setups: Setup[] = [];
  const wanted = (key: string): boolean => SETUPS === null || SETUPS.includes(key);
  try {
    if (wanted('sqlite-disk')) setups.push(await one('sqlite-disk', '1 node, SQLite + disk', {}));
    if (wanted('sqlite-s3')) setups.push(await one('sqlite-s3', '1 node, SQLite + S3 (s3rver)', s3.env({ SVC_S3_PREFIX: 'sqlite' })));
    if (wanted('pg-s3')) setups.push(await one('pg-s3', '1 node, PostgreSQL + S3 (s3rver)', { ...s3.env({ SVC_S3_PREFIX: 'pg' }), SVC_DATABASE_URL: await newDatabase() }));
    if (!wanted('cluster3')) return setups;
    const teardowns: (() => unknown)[] = [];
    const c = await startCluster({ teardown: (fn) => void teardowns.unshift(fn) }, {
      nodes: 3,
      s3,
      databaseUrl: await newDatabase(),
      tls: false,
      env: { SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: forge.url, SVC_S3_PREFIX: 'three', SVC_LOG_REQUESTS: 'false' },
    }).catch(async (e: unknown) => {
      for (const fn of teardowns) await fn();
      throw e;
    });
    const client = new LfsClient(c.url, REPO, TOKEN, 8);
    setups.push({
      key: 'cluster3',
      label: '3 nodes behind nginx, PostgreSQL + S3 (s3rver)',
      client,
      pids: () => c.ports.map((_, i) => c.node(i).child.pid!),
      settled: async () => undefined,
      async stop() {
        await client.close();
        for (const fn of teardowns) await fn();
      },
    });
    return setups;
  } catch (e) {
    for (const s of setups) await s.stop();
    throw e;
  }
}

/** What the section measured, per setup. */
export interface ClusterFigures {
  readonly small: Record<string, number>;
  /** Each round's figure, in round order (rounds of setups compared pair by pair). */
  readonly smallRounds: Record<string, number[]>;
  readonly big: Record<string, number>;
  readonly labels: Record<string, string>;
}

/** The cluster section: every setup started, the rounds taken in turns, one row per setup and load. */
export async function benchCluster(ctx: BenchContext, forge: GitHubEmulator): Promise<ClusterFigures> {
  // Small uploads vary more round to round than a 1 GiB upload: more rounds of them.
  const rounds = ROUNDS > 0 ? ROUNDS : ctx.quick ? 1 : 5;
  const bigRounds = Math.min(rounds, 3);
  const n = ctx.quick ? 200 : 1000;
  const bigSize = ctx.quick ? 128 * MiB : GiB;
  const pgTeardowns: (() => Promise<void>)[] = [];
  // Durable, as in production: a commit waits for its WAL flush, as SQLite's journal waits for its own.
  const pg = await startPostgres((fn) => pgTeardowns.push(fn), { durable: true });
  const s3 = await startS3Server(join(ctx.scratch, 's3'));
  let setups: Setup[] = [];
  try {
    setups = await startSetups(ctx, forge, s3, () => pg.createDatabase());
    const small = new Map<string, Round[]>(setups.map((s) => [s.key, []]));
    const big = new Map<string, Round[]>(setups.map((s) => [s.key, []]));
    const src = new BigSource(ctx, bigSize);
    let bigRound = 0;
    for (let r = 0; r < rounds; r++) {
      // Each round in another order: none always follows the same neighbour.
      const order = setups.map((_, i) => setups[(i + r) % setups.length]!);
      for (const s of order) {
        const { dir, pairs, batchMs } = await smallRound(ctx, s.client, () => s.settled(), `${s.key}-${r}`, n);
        small.get(s.key)!.push(await timed(s, () => parallelPuts(dir, pairs), (ms) => n / ((ms + batchMs) / 1000)));
        rmSync(dir, { recursive: true, force: true });
        if (!BIG || r >= bigRounds) continue;
        const obj = src.round(bigRound++);
        await s.settled();
        big.get(s.key)!.push(await timed(s, () => uploadBig(s.client, obj.oid, obj.size, src.path), (ms) => mbps(bigSize, ms)));
      }
    }
    rmSync(src.path, { force: true });
    const figures: ClusterFigures = { small: {}, smallRounds: {}, big: {}, labels: {} };
    const detail = (rs: Round[], per: number, perName: string): string =>
      `median of ${rs.length} (${rs.map((x) => fmt(x.value)).join(', ')}); nodes' CPU per ${perName} ${rs.map((x) => `${fmt((x.nodeCpuS * 1000) / per)} ms`).join(', ')}; ` +
      `load ${rs.map((x) => `${fmt(x.load[0])}→${fmt(x.load[1])}`).join(', ')}`;
    for (const s of setups) {
      const sm = small.get(s.key)!;
      const bg = big.get(s.key)!;
      figures.small[s.key] = median(sm.map((x) => x.value));
      figures.smallRounds[s.key] = sm.map((x) => x.value);
      if (bg.length > 0) figures.big[s.key] = median(bg.map((x) => x.value));
      figures.labels[s.key] = s.label;
      ctx.record({ key: `cluster.${s.key}.par64k`, group: 'server', label: `${n} × 64 KiB, 8 curl processes: ${s.label}`, value: figures.small[s.key]!, unit: 'objects/s', detail: detail(sm, n / 1000, '1000 objects') });
      if (bg.length > 0) ctx.record({ key: `cluster.${s.key}.upload1g`, group: 'server', label: `${bigSize / MiB} MiB upload (batch + curl -T): ${s.label}`, value: figures.big[s.key]!, unit: 'MB/s', detail: detail(bg, bigSize / GiB, 'GiB') });
    }
    ctx.note('cluster: nginx serves plain HTTP in this section (TLS would be in every request of the three-node figure only); PostgreSQL, s3rver and nginx CPU is not in the nodes\' CPU figures.');
    return figures;
  } finally {
    for (const s of setups) await s.stop();
    await s3.stop();
    for (const fn of pgTeardowns) await fn();
  }
}

/**
 * The rows set against each other: each setup against one node on SQLite + disk, and PostgreSQL's
 * cost per small upload judged against SQLite on the same store (S3, no journal in either, both
 * durable at commit): the median of the rounds' differences, each round's two runs made within the
 * same round, so that the machine's load drifting over the section falls on both alike.
 */
export function compareCluster(f: ClusterFigures): Comparison[] {
  const out: Comparison[] = [];
  const base = f.small['sqlite-disk'];
  const sameStore = f.small['sqlite-s3'];
  const baseBig = f.big['sqlite-disk'];
  const msPer = (rate: number): number => 1000 / rate;
  for (const key of Object.keys(f.small)) {
    const rate = f.small[key]!;
    out.push({
      label: `64 KiB objects, 8 curl processes: ${f.labels[key]}`,
      client: 'curl',
      ours: `${fmt(rate)} objects/s (${fmt(msPer(rate))} ms/object)`,
      limit: base === undefined ? '—' : `1 node SQLite + disk ${fmt(base)} objects/s`,
      ratio: base === undefined ? '—' : `${fmt(msPer(rate) - msPer(base))} ms/object over SQLite + disk`,
      ratioValue: base === undefined ? null : rate / base,
      target: '—',
      pass: null,
    });
    const big = f.big[key];
    if (big === undefined) continue;
    out.push({
      label: `1 GiB upload: ${f.labels[key]}`,
      client: 'curl',
      ours: `${fmt(big)} MB/s`,
      limit: baseBig === undefined ? '—' : `1 node SQLite + disk ${fmt(baseBig)} MB/s`,
      ratio: baseBig === undefined ? '—' : `${Math.round((big / baseBig) * 100)}%`,
      ratioValue: baseBig === undefined ? null : big / baseBig,
      target: '—',
      pass: null,
    });
  }
  const pgRounds = f.smallRounds['pg-s3'];
  const sqliteRounds = f.smallRounds['sqlite-s3'];
  if (pgRounds !== undefined && sqliteRounds !== undefined && sameStore !== undefined) {
    const pg = f.small['pg-s3']!;
    const diffs = pgRounds.map((rate, r) => msPer(rate) - msPer(sqliteRounds[r]!));
    const cost = median([...diffs]);
    out.push({
      label: 'PostgreSQL\'s cost per 64 KiB upload (1 node, S3 store: PostgreSQL vs SQLite), 8 curl processes',
      client: 'curl',
      ours: `${fmt(cost)} ms/object (median of the rounds' differences: ${diffs.map((d) => fmt(d)).join(', ')})`,
      limit: `SQLite + S3 ${fmt(msPer(sameStore))} ms/object, PostgreSQL + S3 ${fmt(msPer(pg))} ms/object (medians)`,
      ratio: `${Math.round((pg / sameStore) * 100)}% of SQLite's rate`,
      ratioValue: pg / sameStore,
      target: '≤ 0.3 ms/object',
      pass: cost <= 0.3,
    });
  }
  return out;
}

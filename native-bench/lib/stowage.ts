/** Our server as the bench starts it: the built product's process, a forge emulator, a client with push rights. */
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { BenchContext } from './context.js';
import { LfsClient } from './lfs-client.js';
import { GitHubEmulator, startServer, type RunningServer } from './product.js';

/** native-bench/dist, where cpu-profile.preload.js is. */
const BENCH_DIST = join(dirname(fileURLToPath(import.meta.url)), '..');
export const REPO = 'bench/assets';
export const TOKEN = 'bench-push-token';

/** A running server with its forge and a client holding a token with push on one repository. */
export interface Stowage {
  readonly server: RunningServer;
  readonly client: LfsClient;
  readonly pid: number;
  /** Stops the server and removes its data; with `failure`, prints the server's last log lines first. */
  stop(failure?: unknown): Promise<void>;
}

/** The forge emulator shared by every server of the run. */
export async function startForge(): Promise<GitHubEmulator> {
  const forge = new GitHubEmulator();
  forge.tokens.set(TOKEN, { login: 'bench', repos: { [REPO]: 'push' } });
  forge.repos.set(REPO, { private: true });
  await forge.start();
  return forge;
}

/** Starts a server whose data dir lives under the scratch dir (same disk as the limits). */
export async function startStowage(ctx: BenchContext, forge: GitHubEmulator, name: string, env: Record<string, string> = {}): Promise<Stowage> {
  const dataDir = join(ctx.scratch, `server-${name}`);
  mkdirSync(dataDir, { recursive: true });
  const profiling: Record<string, string> = {};
  if (ctx.profileDir !== null) {
    mkdirSync(ctx.profileDir, { recursive: true });
    profiling.NODE_OPTIONS = `--import=${pathToFileURL(join(BENCH_DIST, 'cpu-profile.preload.js')).href}`;
    profiling.STOWAGE_CPU_PROFILE = join(ctx.profileDir, `server-${name}.cpuprofile`);
  }
  const server = await startServer({ SVC_AUTH: 'forge_a', SVC_FORGE_A_API_URL: forge.url, ...profiling, ...env }, { dataDir });
  const client = new LfsClient(server.url, REPO, TOKEN, 8);
  return {
    server,
    client,
    pid: server.child.pid!,
    async stop(failure?: unknown) {
      if (failure !== undefined) {
        process.stderr.write(`server ${name} failed (${String(failure)}); exit code ${server.child.exitCode}; last log lines:\n${server.logs.slice(-15).join('\n')}\n`);
      }
      await client.close();
      await server.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}


/** An object kept in the benchmark's memory, sent as 1 MiB chunks. */
export interface MemObject {
  readonly oid: string;
  readonly size: number;
  readonly data: Buffer;
}

export function memObject(data: Buffer): MemObject {
  return { oid: createHash('sha256').update(data).digest('hex'), size: data.length, data };
}


/** Lets the server finish background work of the previous measure (journal flushes, writeback). */
export function settle(ms = 1000): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}


/**
 * Seconds until the server's journal holds no segment: the small objects of the bursts before have
 * files of their own (retirement starts after a 1 s lull and yields to a burst that starts). Used
 * before a small-object measure, so that it is not measured against the previous one's retirement.
 */
export async function journalRetired(dataDir: string, maxMs = 60_000): Promise<number> {
  const t0 = performance.now();
  const journal = join(dataDir, 'journal');
  while (readdirSync(journal).some((f) => f.startsWith('seg-')) && performance.now() - t0 < maxMs) await settle(20);
  return (performance.now() - t0) / 1000;
}

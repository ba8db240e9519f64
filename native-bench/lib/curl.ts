/**
 * curl as the bench drives it, as a user would script it: its default buffer sizes, `Expect:
 * 100-continue` as it sends it on a PUT, one keep-alive process for a sequence of objects, one
 * process per parallel client. Shared by the curl, git-lfs, memory and cluster benches.
 */
import { closeSync, fdatasyncSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { PARALLEL_CURLS, runClient, type ClientRun } from './client-run.js';
import type { BenchContext } from './context.js';
import { SeededBytes } from './data-gen.js';
import type { LfsAction, LfsClient } from './lfs-client.js';
import { fmt } from './report.js';
import type { ClientRound } from './session.js';
import { memObject, TOKEN, type MemObject } from './stowage.js';

export const USER = `bench:${TOKEN}`;
/** A config-file string: curl reads backslash escapes inside double quotes. */
const q = (s: string): string => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/** Rounds per row: an odd number, so the median is one of them. */
export const clientRounds = (ctx: BenchContext): number => (ctx.quick ? 1 : 3);

/**
 * Rounds of each small-object kind run first on a server just started, left out of the medians: V8's
 * optimizing compiler takes up a function only after some thousands of calls of it, so the request
 * path is still being compiled over the first few thousand requests, while a server that has been up
 * serves warm. `small-ab.js curl --warm --v8-trace` (one round of each left out, as before) counted
 * in the next rounds 59 TurboFan compiles (328 ms of CPU), then 15 (105 ms), then 3 (10–27 ms), and
 * server CPU per sequential PUT 1.02, 0.68, 0.56, 0.55 ms: three rounds of each go first.
 */
export const warmUpRounds = (ctx: BenchContext): number => (ctx.quick ? 1 : 3);

/** `curl -T file` of one object to its upload action, with the action's headers; throws unless 200. */
export function curlPut(file: string, action: LfsAction): Promise<ClientRun> {
  const headers = Object.entries(action.header ?? {}).flatMap(([k, v]) => ['-H', `${k}: ${v}`]);
  return checked(runClient(['curl', '-sS', '-u', USER, ...headers, '-T', file, '-o', '/dev/null', '-w', WRITE_OUT, action.href]), 1);
}

/** `curl -o /dev/null` of one object; throws unless 200. */
export function curlGet(href: string): Promise<ClientRun> {
  return checked(runClient(['curl', '-sS', '-u', USER, '-o', '/dev/null', '-w', WRITE_OUT, href]), 1);
}

/** What curl writes after each transfer: the status and how many connections it opened for it. */
export const WRITE_OUT = '%{http_code} %{num_connects}\\n';

/** Counts the `WRITE_OUT` lines that say 200, and the connections curl opened for them. */
export function tally(stdout: string): { ok: number; connects: number } {
  let ok = 0;
  let connects = 0;
  for (const m of stdout.matchAll(/^(\d{3}) (\d+)$/gm)) {
    if (m[1] === '200') ok++;
    connects += Number(m[2]);
  }
  return { ok, connects };
}

/** Every transfer must answer 200; returns the run and the connections curl opened. */
export async function checked(run: Promise<ClientRun>, expected: number): Promise<ClientRun & { connects: number }> {
  const r = await run;
  const { ok, connects } = tally(r.stdout);
  if (ok !== expected) throw new Error(`curl: ${ok} of ${expected} transfers answered 200 (${r.stdout.replace(/\s+/g, ' ').slice(0, 200)}) ${r.stderr.slice(-500)}`);
  return { ...r, connects };
}

/** A curl config that PUTs each file to its href in turn over one keep-alive connection. */
export function putConfig(pairs: { file: string; href: string }[]): string {
  const lines = ['silent', 'show-error', `user = ${q(USER)}`, `write-out = "${WRITE_OUT}"`];
  for (const p of pairs) lines.push(`url = ${q(p.href)}`, `upload-file = ${q(p.file)}`, 'output = "/dev/null"');
  return `${lines.join('\n')}\n`;
}

/**
 * The 64 KiB objects of one round, written as files, and the batches (per 100, as git-lfs) for them
 * through `client`; `settled` waits out what the previous round left the server to do.
 */
export async function smallRound(ctx: BenchContext, client: LfsClient, settled: () => Promise<unknown>, tag: string, n: number): Promise<{ dir: string; pairs: { file: string; href: string }[]; batchMs: number }> {
  const dir = join(ctx.scratch, `curl-${tag}`);
  mkdirSync(dir, { recursive: true });
  const pool = new SeededBytes(`curl-${tag}`).bytes(n * 65536);
  const objs: MemObject[] = [];
  for (let i = 0; i < n; i++) {
    const o = memObject(pool.subarray(i * 65536, (i + 1) * 65536));
    writeFileSync(join(dir, `${i}.bin`), o.data);
    objs.push(o);
  }
  await settled();
  const pairs: { file: string; href: string }[] = [];
  const t0 = performance.now();
  for (let g = 0; g < n; g += 100) {
    const entries = await client.batch('upload', objs.slice(g, g + 100).map((o) => ({ oid: o.oid, size: o.size })));
    entries.forEach((e, i) => pairs.push({ file: join(dir, `${g + i}.bin`), href: e.actions!.upload!.href }));
  }
  return { dir, pairs, batchMs: performance.now() - t0 };
}

/** The warm-up rounds' figures and server CPU, for a row's detail (see warmUpRounds). */
export function warmUpDetail(warm: readonly ClientRound[], n: number, what: string, unit: string): string {
  return (
    `${warm.length === 1 ? `the first ${what}` : `the first ${warm.length} ${what}s`} after the server started, left out (warm-up): ${warm.map((w) => fmt(w.value)).join(', ')} ${unit}, ` +
    `server CPU per 1000 objects ${warm.map((w) => `${fmt((w.span.serverCpuS * 1e6) / n)} ms`).join(', ')}`
  );
}

/** Every pair PUT by 8 curl processes at once (a keep-alive connection each); throws unless all answer 200. */
export async function parallelPuts(dir: string, pairs: { file: string; href: string }[], tag = 'put'): Promise<ClientRun & { connects: number }> {
  const configs = Array.from({ length: 8 }, (_, w) => {
    const path = join(dir, `${tag}-${w}.curlrc`);
    writeFileSync(path, putConfig(pairs.filter((_, i) => i % 8 === w)));
    return path;
  });
  const run = await runClient(configs, { script: PARALLEL_CURLS });
  const t = configs.map((c) => tally(readFileSync(`${c}.out`, 'utf8')));
  const ok = t.reduce((a, b) => a + b.ok, 0);
  if (ok !== pairs.length) throw new Error(`8 curl processes: ${ok} of ${pairs.length} PUTs answered 200`);
  return { ...run, connects: t.reduce((a, b) => a + b.connects, 0) };
}

/**
 * A 1 GiB source file for curl -T, kept in memory too so each round can change its first bytes and
 * take the new oid without writing the whole file again (the server keeps every object it gets).
 */
export class BigSource {
  readonly path: string;
  readonly #data: Buffer;

  constructor(ctx: BenchContext, size: number, name = 'curl-big') {
    this.path = join(ctx.scratch, `${name}.bin`);
    this.#data = new SeededBytes(name).bytes(size);
    writeFileSync(this.path, this.#data);
    const fd = openSync(this.path, 'r+');
    fdatasyncSync(fd);
    closeSync(fd);
  }

  /**
   * Makes the file a new object (its first 8 bytes = `round`) and returns its oid, synced to disk,
   * and the CPU seconds its sha256 took here (node:crypto, as the server hashes an upload).
   */
  round(round: number): { oid: string; size: number; hashCpuS: number } {
    this.#data.writeDoubleBE(round, 0);
    const fd = openSync(this.path, 'r+');
    try {
      writeSync(fd, this.#data, 0, 8, 0);
      fdatasyncSync(fd);
    } finally {
      closeSync(fd);
    }
    const cpu0 = process.cpuUsage();
    const { oid } = memObject(this.#data);
    const cpu = process.cpuUsage(cpu0);
    return { oid, size: this.#data.length, hashCpuS: (cpu.user + cpu.system) / 1e6 };
  }
}

/** batch (undici) + curl -T of the source file; the server must not hold the object yet. */
export async function uploadBig(client: LfsClient, oid: string, size: number, file: string): Promise<ClientRun> {
  const t0 = performance.now();
  const [entry] = await client.batch('upload', [{ oid, size }]);
  if (entry?.actions?.upload === undefined) throw new Error(`server already holds ${oid}: the upload would not be measured`);
  const batchMs = performance.now() - t0;
  const run = await curlPut(file, entry.actions.upload);
  return { ...run, ms: run.ms + batchMs };
}

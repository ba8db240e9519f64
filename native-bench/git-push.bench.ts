/**
 * The user's view through the real git-lfs client (`lfs.concurrenttransfers` at its default):
 * `git push` of one large asset and of many 64 KiB files to a fresh bare remote, and `git clone` of
 * each repository. Each push comes from a fresh repository, so its first request goes out
 * without credentials and gets the 401 that asks for them, as a user's first push does. The times
 * include git's and git-lfs's own work; the server's CPU is taken apart from theirs, and each clone
 * is repeated from a server that stores nothing, to tell the client's share of its wall time.
 */
import { spawnSync } from 'node:child_process';
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { runClient } from './lib/client-run.js';
import type { BenchContext } from './lib/context.js';
import { clientRounds, warmUpDetail } from './lib/curl.js';
import { GiB, MiB, SeededBytes } from './lib/data-gen.js';
import { committedProject, push, stageObject } from './lib/git-lfs.js';
import { startPeer } from './lib/peers.js';
import { watchServer } from './lib/proc-stats.js';
import { GitSandbox } from './lib/product.js';
import { fmt } from './lib/report.js';
import type { ClientRound, RealClientSession } from './lib/session.js';
import { median } from './lib/stats.js';
import { journalRetired, REPO, TOKEN } from './lib/stowage.js';

/** A clone of the same repository from a server that stores nothing (null-peer.ts). */
interface CloneFloor {
  readonly ms: number;
  readonly serverCpuS: number;
  readonly clientCpuS: number;
}

/** A file of a cloned repository that must hold its object's bytes (not the pointer), and their size. */
interface ClonedFile {
  readonly path: string;
  readonly size: number;
}

/** `git clone` into `dest`, checked: `file` must hold the object, which the smudge filter fetched. */
async function cloneChecked(sb: GitSandbox, args: string[], dest: string, root: string, file: ClonedFile): Promise<{ ms: number; clientCpuS: number }> {
  const run = await runClient(['git', 'clone', '-q', ...args, dest], { env: sb.env, cwd: root });
  const got = statSync(join(dest, file.path)).size;
  if (got !== file.size) throw new Error(`git clone left a ${got}-byte file where the ${file.size}-byte object of ${file.path} belongs`);
  return run;
}

/**
 * The same clone, right after ours, with git-lfs pointed at a null peer holding the repository's
 * objects in memory (batch answered at once, no authentication, index or disk): what git-lfs,
 * loopback TCP and uWS cost the server per object with no server work behind them, the floor of
 * the clone row's server CPU. `objects` is the pushing repository's `.git/lfs/objects`.
 */
async function cloneFromNullPeer(sb: GitSandbox, remote: string, objects: string, root: string, tag: string, file: ClonedFile): Promise<CloneFloor> {
  const peer = await startPeer('null-peer.js', [objects]);
  try {
    return await cloneFromPeer(sb, peer, remote, join(root, `clone-floor-${tag}`), root, file);
  } finally {
    peer.stop();
  }
}

/** A checked clone of `remote` into `dest` (removed after) with git-lfs pointed at a peer, the peer's CPU measured. */
async function cloneFromPeer(sb: GitSandbox, peer: { port: number; pid: number }, remote: string, dest: string, root: string, file: ClonedFile): Promise<CloneFloor> {
  try {
    const end = watchServer(peer.pid);
    const run = await cloneChecked(sb, ['-c', `lfs.url=http://127.0.0.1:${peer.port}/${REPO}`, remote], dest, root, file);
    return { ms: run.ms, serverCpuS: end().serverCpuS, clientCpuS: run.clientCpuS };
  } finally {
    rmSync(dest, { recursive: true, force: true });
  }
}

/** The serving minimum (serving-peer.ts), started once and kept warm across the section's clones; `root` is its objects' folder. */
interface ServingPeer {
  readonly port: number;
  readonly pid: number;
  readonly root: string;
  readonly stop: () => void;
}

/**
 * The same clone from the serving minimum: the round's objects linked into its folder and read into
 * its index first (not measured), then the clone, each `GET` reading the object's file.
 */
async function cloneFromServingPeer(sb: GitSandbox, peer: ServingPeer, remote: string, objects: string, root: string, tag: string, file: ClonedFile): Promise<CloneFloor> {
  rmSync(peer.root, { recursive: true, force: true });
  const linked = spawnSync('cp', ['-al', objects, peer.root], { encoding: 'utf8' });
  if (linked.status !== 0) throw new Error(`cp -al ${objects} ${peer.root}: ${linked.stderr}`);
  const indexed = await fetch(`http://127.0.0.1:${peer.port}/index`, { method: 'POST' });
  if (!indexed.ok) throw new Error(`serving-peer.js /index answered ${indexed.status}`);
  await indexed.arrayBuffer();
  return cloneFromPeer(sb, peer, remote, join(root, `clone-serving-${tag}`), root, file);
}

/**
 * Clones of the small-object repository run first on a server just started, left out of the row's
 * median: V8 compiles the GET path over the first few thousand requests (see warmUpRounds).
 * `small-ab.js clone --v8-trace` (one clone left out, as before) counted in the next clones 15, 19,
 * 5, 3, 1, 1 TurboFan compiles (106, 167, 42, 4, 1, 2 ms of CPU), and server CPU per object 0.33,
 * 0.32, 0.26, 0.23, 0.24 ms: four clones go first.
 */
const warmUpClones = (ctx: BenchContext): number => (ctx.quick ? 1 : 4);

/**
 * git push of 1 GiB, git push of 1000 × 64 KiB files and git clone of each, taking turns round by
 * round; each row the median of its rounds.
 */
export async function benchGitLfs(session: RealClientSession, only: (name: string) => boolean): Promise<void> {
  const ctx = session.ctx;
  const url = session.s.server.url;
  const bigSize = ctx.quick ? 128 * MiB : GiB;
  const n = ctx.quick ? 200 : 1000;
  const root = join(ctx.scratch, 'git');
  const sb = await GitSandbox.create(join(root, 'home'), url, TOKEN);
  const lfs = `git-lfs ${session.figures.gitLfsVersion ?? ''}`.trim();
  const pushBig: ClientRound[] = [];
  const pushSmall: ClientRound[] = [];
  const clone: ClientRound[] = [];
  const cloneWarmUp: ClientRound[] = []; // the first clones, left out (warmUpClones)
  const cloneFloor: CloneFloor[] = [];
  const cloneServing: CloneFloor[] = []; // the serving minimum (serving-peer.ts), after the null peer
  const cloneBig: ClientRound[] = [];
  const cloneBigFloor: CloneFloor[] = [];
  const bigFile: ClonedFile = { path: 'asset.bin', size: bigSize };
  const smallFile: ClonedFile = { path: join('assets', `${n - 1}.bin`), size: 65536 };
  const smallFiles = async (work: string, r: number): Promise<void> => {
    const pool = new SeededBytes(`git-small-${r}`).bytes(n * 65536);
    for (let i = 0; i < n; i++) await stageObject(work, `assets/${i}.bin`, [pool.subarray(i * 65536, (i + 1) * 65536)]);
  };
  // Long-lived, as our server: it warms up over the same warm-up clones.
  const servingRoot = join(root, 'serving-peer');
  const serving: ServingPeer | null = only('git-clone') ? { ...(await startPeer('serving-peer.js', [servingRoot])), root: servingRoot } : null;
  const { growth } = await session.section(async () => {
    for (let r = 0; r < clientRounds(ctx); r++) {
      if (only('git-push') || only('git-clone')) {
        const big = await committedProject(sb, join(root, `big-${r}`), url, (work) => stageObject(work, bigFile.path, new SeededBytes(`git-big-${r}`).chunks(bigSize)));
        if (only('git-push')) pushBig.push(await session.round(() => push(sb, big.work), (ms) => ms));
        else await push(sb, big.work);
        if (only('git-clone')) {
          const dest = join(root, `clone-big-${r}`);
          cloneBig.push(await session.round(() => cloneChecked(sb, [big.remote], dest, root, bigFile), (ms) => ms));
          rmSync(dest, { recursive: true, force: true });
          cloneBigFloor.push(await cloneFromNullPeer(sb, big.remote, join(big.work, '.git', 'lfs', 'objects'), root, `big-${r}`, bigFile));
        }
        rmSync(join(root, `big-${r}`), { recursive: true, force: true });
      }
      let remote: string | null = null;
      let objects = '';
      if (only('git-push') || only('git-clone')) {
        const small = await committedProject(sb, join(root, `small-${r}`), url, (work) => smallFiles(work, r));
        await journalRetired(session.s.server.dataDir);
        if (only('git-push')) pushSmall.push(await session.round(() => push(sb, small.work), (ms) => ms));
        else await push(sb, small.work);
        remote = small.remote;
        objects = join(small.work, '.git', 'lfs', 'objects');
      }
      if (only('git-clone') && remote !== null) {
        await journalRetired(session.s.server.dataDir);
        const cloned = async (tag: string): Promise<ClientRound> => {
          const dest = join(root, `clone-${tag}`);
          const round = await session.round(() => cloneChecked(sb, [remote!], dest, root, smallFile), (ms) => ms);
          rmSync(dest, { recursive: true, force: true });
          return round;
        };
        // Clones first, left out of the median (as the small-upload rows' first rounds): the first
        // time this server serves small objects, while V8 still compiles that path.
        if (r === 0) {
          for (let w = 0; w < warmUpClones(ctx); w++) {
            cloneWarmUp.push(await cloned(`warm-up-${w}`));
            await cloneFromServingPeer(sb, serving!, remote, objects, root, `warm-up-${w}`, smallFile);
          }
        }
        clone.push(await cloned(String(r)));
        cloneFloor.push(await cloneFromNullPeer(sb, remote, objects, root, String(r), smallFile));
        cloneServing.push(await cloneFromServingPeer(sb, serving!, remote, objects, root, String(r), smallFile));
      }
      rmSync(join(root, `small-${r}`), { recursive: true, force: true });
    }
  }).finally(() => serving?.stop());
  session.figures.movedBytes += (pushBig.length + cloneBig.length) * bigSize + (pushSmall.length + clone.length + cloneWarmUp.length) * n * 65536;
  const small = { name: '1000 objects', units: n / 1000 };
  if (pushBig.length > 0) session.figures.gitPush1gMs = session.recordRow('real.git_push_1g', `git push of a ${bigSize / MiB} MiB asset to a fresh bare remote (first push of a new repository: 401, then credentials)`, lfs, 'ms', pushBig, { name: 'GiB', units: bigSize / GiB }, growth);
  if (cloneBig.length > 0) {
    const floorMs = median(cloneBigFloor.map((f) => f.ms));
    const floorDetail =
      `the same clone right after each of ours from a server that stores nothing (null-peer.ts, the object streamed from memory): wall ${fmt(floorMs)} ms ` +
      `(${cloneBigFloor.map((f) => `${fmt(f.ms)} ms`).join(', ')}), client CPU ${fmt(median(cloneBigFloor.map((f) => f.clientCpuS)) * 1000)} ms, server CPU ${fmt(median(cloneBigFloor.map((f) => f.serverCpuS)) * 1000)} ms`;
    const ms = session.recordRow('real.git_clone_1g', `git clone of the ${bigSize / MiB} MiB asset's repository (smudge download and checkout included)`, lfs, 'ms', cloneBig, { name: 'GiB', units: bigSize / GiB }, growth, floorDetail);
    session.figures.gitClone1g = { ms, serverCpuS: median(cloneBig.map((c) => c.span.serverCpuS)), clientCpuS: median(cloneBig.map((c) => c.clientCpuS)), floorMs };
  }
  if (pushSmall.length > 0) session.figures.gitPushSmallMs = session.recordRow('real.git_push_64k', `git push of ${n} × 64 KiB files to a fresh bare remote`, lfs, 'ms', pushSmall, small, growth);
  if (clone.length > 0) {
    const warmDetail = cloneWarmUp.length === 0 ? '' : warmUpDetail(cloneWarmUp, n, 'clone', 'ms');
    const perObject = (cpuS: number): number => (cpuS * 1000) / n;
    const floorCpu = median(cloneFloor.map((f) => f.serverCpuS));
    const floorDetail =
      `the same clone right after each of ours from a server that stores nothing (null-peer.ts: uWS answering the batch and each object from memory), server CPU per 1000 objects ` +
      `${fmt(perObject(floorCpu) * 1000)} ms (${cloneFloor.map((f) => `${fmt(perObject(f.serverCpuS) * 1000)} ms`).join(', ')}), wall ${cloneFloor.map((f) => `${fmt(f.ms)} ms`).join(', ')}`;
    const servingCpu = median(cloneServing.map((f) => f.serverCpuS));
    const servingDetail =
      `the same clone right after the null peer's from the serving minimum (serving-peer.ts: the batch from an index in memory, each GET's token hash checked and its object's file opened, read and closed; warmed up over the same warm-up clones), server CPU per 1000 objects ` +
      `${fmt(perObject(servingCpu) * 1000)} ms (${cloneServing.map((f) => `${fmt(perObject(f.serverCpuS) * 1000)} ms`).join(', ')}), wall ${cloneServing.map((f) => `${fmt(f.ms)} ms`).join(', ')}`;
    const ms = session.recordRow('real.git_clone_64k', `git clone of the ${n} × 64 KiB repository (smudge downloads included)`, lfs, 'ms', clone, small, growth, [warmDetail, floorDetail, servingDetail].filter(Boolean).join('; '));
    const serverCpuS = median(clone.map((c) => c.span.serverCpuS));
    session.figures.gitClone = {
      ms,
      serverCpuMsPerObject: perObject(serverCpuS),
      clientCpuS: median(clone.map((c) => c.clientCpuS)),
      serverCpuS,
      floorCpuMsPerObject: perObject(floorCpu),
      servingCpuMsPerObject: perObject(servingCpu),
    };
  }
}

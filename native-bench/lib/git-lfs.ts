/** git and git-lfs as the bench drives them: a project staged as git-lfs leaves it, and its push timed. */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { runClient } from './client-run.js';
import type { GitSandbox } from './product.js';
import { REPO } from './stowage.js';

/**
 * Stores an object the way `git add` through git-lfs's clean filter leaves it: the bytes under
 * .git/lfs/objects and a pointer file in the work tree (its clean is then a pass-through). What is
 * timed, the push, reads the same files; only the set-up's copy and hashing by git-lfs are saved.
 */
export async function stageObject(work: string, file: string, chunks: Iterable<Buffer>): Promise<string> {
  const tmp = join(work, '.git', 'lfs', `incoming-${file.replace(/\//g, '-')}`);
  mkdirSync(dirname(tmp), { recursive: true });
  const out = createWriteStream(tmp);
  const hash = createHash('sha256');
  let size = 0;
  for (const c of chunks) {
    hash.update(c);
    size += c.length;
    if (!out.write(c)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
  const oid = hash.digest('hex');
  const dir = join(work, '.git', 'lfs', 'objects', oid.slice(0, 2), oid.slice(2, 4));
  mkdirSync(dir, { recursive: true });
  renameSync(tmp, join(dir, oid));
  mkdirSync(dirname(join(work, file)), { recursive: true });
  writeFileSync(join(work, file), `version https://git-lfs.github.com/spec/v1\noid sha256:${oid}\nsize ${size}\n`);
  return oid;
}

/** A fresh project (bare remote + work tree) whose commit holds the objects `fill` stages. */
export async function committedProject(sb: GitSandbox, dir: string, url: string, fill: (work: string) => Promise<unknown>): Promise<{ remote: string; work: string }> {
  const p = await sb.newProject(dir, `${url}/${REPO}`);
  await fill(p.work);
  await sb.git(p.work, 'add', '.');
  await sb.git(p.work, 'commit', '-qm', 'assets');
  // On disk before the timed push, so that its writeback does not compete with the server's writes.
  spawnSync('sync');
  return p;
}

/** `git push` timed, with the CPU of git and git-lfs. */
export const push = (sb: GitSandbox, work: string): Promise<{ ms: number; clientCpuS: number }> => runClient(['git', 'push', '-q', 'origin', 'main'], { env: sb.env, cwd: work });

/**
 * The user's view of an upload: `git push` of one large asset through the real git-lfs client, on a
 * fresh clone (its first PUT goes out without credentials and gets the 401 that asks for them), to
 * a server with compression off and one with zstd:3. The time includes git's and git-lfs's own work.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { GitHubEmulator } from '../test/helpers/forge-emulator.js';
import { GitSandbox } from '../test/helpers/git.js';
import { GiB, MiB, SeededBytes } from './lib/data-gen.js';
import { fmt } from './lib/report.js';
import { mbps, type BenchContext } from './limits.bench.js';
import { REPO, TOKEN, startStowage } from './server.bench.js';

export async function benchGitPush(ctx: BenchContext, forge: GitHubEmulator): Promise<void> {
  const version = spawnSync('git', ['lfs', 'version'], { encoding: 'utf8' });
  if (version.status !== 0) {
    ctx.note('git push not measured: git-lfs is not installed (apt-get install git-lfs)');
    return;
  }
  const client = /git-lfs\/(\S+)/.exec(version.stdout)?.[1] ?? '?';
  const size = ctx.quick ? 128 * MiB : GiB;
  for (const [tag, env] of [['plain', {}], ['zstd:3', { SVC_COMPRESSION: 'zstd:3' }]] as const) {
    const s = await startStowage(ctx, forge, `git-${tag.replace(':', '')}`, env);
    try {
      const dir = join(ctx.scratch, `git-${tag.replace(':', '')}`);
      mkdirSync(dir, { recursive: true });
      const sb = await GitSandbox.create(join(dir, 'home'), s.server.url, TOKEN);
      const { work } = await sb.newProject(join(dir, 'project'), `${s.server.url}/${REPO}`);
      writeFileSync(join(work, 'asset.bin'), new SeededBytes(`git-push-${tag}`).bytes(size));
      await sb.git(work, 'add', '.');
      await sb.git(work, 'commit', '-qm', 'asset');
      const t0 = performance.now();
      await sb.git(work, 'push', '-q', 'origin', 'main');
      const ms = performance.now() - t0;
      ctx.record({
        key: `server.git_push_${tag.replace(':', '')}`,
        group: 'server',
        label: `git push of a ${size / MiB} MiB asset through git-lfs ${client} (first push of a fresh clone), ${tag === 'plain' ? 'compression off' : tag}`,
        value: mbps(size, ms),
        unit: 'MB/s',
        detail: `${fmt(ms)} ms, git's and git-lfs's own work included; random bytes (chunked PUT, as uWS resets 10-digit Content-Lengths)`,
      });
    } finally {
      await s.stop();
    }
  }
}

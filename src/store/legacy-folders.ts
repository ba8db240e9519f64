import { statSync } from 'node:fs';
import { link, mkdir, rename, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { shardPath, type Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { DirSyncer } from './dir-sync.js';
import { walkLayout, type StrayReason } from './foreign-layout.js';
import { openOnThreadpool } from './inline-reader.js';
import type { BlobReader, LegacyLayout, LegacyScan } from './types.js';

/** How long the presence of a repository's legacy folder is remembered. */
const LEGACY_DIR_TTL_MS = 5000;

/**
 * The disk backend's LegacyLayout capability: per-repository folders `repos/{org}/{repo}/ab/cd/<oid>`
 * (docs/maintenance.md), served until dedupe folds them into the shared store by hard link. RepoName
 * segments and the Oid brand are validated, so no path here leaves the root.
 */
export class LegacyFolders implements LegacyLayout {
  readonly #root: string;
  readonly #staging: string;
  readonly #dirs: DirSyncer;
  readonly #objectPath: (oid: Oid) => string;
  /** Which repositories have a legacy folder (by folder: each spelling has its own), so batch stats nothing for the others. */
  readonly #present = new Map<string, { present: boolean; at: number }>();

  constructor(root: string, dirs: DirSyncer, objectPath: (oid: Oid) => string) {
    this.#root = root;
    this.#staging = join(root, 'staging');
    this.#dirs = dirs;
    this.#objectPath = objectPath;
  }

  #dirOf(repo: RepoName): string {
    return join(this.#root, 'repos', repo.org, repo.repo);
  }

  #pathOf(repo: RepoName, oid: Oid): string {
    return join(this.#dirOf(repo), shardPath(oid));
  }

  openLegacy(repo: RepoName, oid: Oid): Promise<BlobReader | null> {
    // Legacy files come from other servers and are never in our framed form: served as they are.
    return openOnThreadpool(this.#pathOf(repo, oid), false);
  }

  legacySizeSync(repo: RepoName, oid: Oid): number | null {
    const now = Date.now();
    const dir = this.#dirOf(repo);
    const known = this.#present.get(dir);
    let present = known !== undefined && now - known.at < LEGACY_DIR_TTL_MS ? known.present : null;
    if (present === null) {
      try {
        present = statSync(dir).isDirectory();
      } catch {
        present = false;
      }
      if (this.#present.size > 10_000) this.#present.clear();
      this.#present.set(dir, { present, at: now });
    }
    if (!present) return null;
    try {
      const st = statSync(this.#pathOf(repo, oid));
      return st.isFile() ? st.size : null;
    } catch {
      return null;
    }
  }

  async scanLegacy(repo: RepoName, listed: number): Promise<LegacyScan> {
    const objects: LegacyScan['objects'][number][] = [];
    const strays: { rel: string; reason: StrayReason }[] = [];
    const strayCounts: Partial<Record<StrayReason, number>> = {};
    for await (const e of walkLayout(this.#dirOf(repo), 'full')) {
      if (e.kind === 'object') {
        objects.push({ oid: e.oid, path: e.path, size: e.size, mtimeMs: e.mtimeMs });
        continue;
      }
      strayCounts[e.reason] = (strayCounts[e.reason] ?? 0) + 1;
      if (e.reason !== 'set_aside' && strays.length < listed) strays.push({ rel: e.rel, reason: e.reason });
    }
    return { objects, strays, strayCounts };
  }

  async setAsideLegacy(repo: RepoName, oid: Oid, suffix: 'refused' | 'corrupt'): Promise<void> {
    const path = this.#pathOf(repo, oid);
    await rename(path, `${path}.${suffix}`).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    });
    await this.#dirs.sync(dirname(path));
  }

  async maintenanceStaging(): Promise<string> {
    const dir = join(this.#staging, '.maintenance'); // hidden: not an upload's staging file
    await mkdir(dir, { recursive: true });
    return dir;
  }

  async adoptFile(oid: Oid, from: string): Promise<boolean> {
    const final = this.#objectPath(oid);
    const created = await mkdir(dirname(final), { recursive: true });
    try {
      await link(from, final);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    }
    const syncs = [this.#dirs.sync(dirname(final))];
    if (created !== undefined) syncs.push(this.#dirs.sync(dirname(dirname(final))), this.#dirs.sync(dirname(dirname(dirname(final)))));
    await Promise.all(syncs);
    return true;
  }

  async purge(path: string): Promise<void> {
    await unlink(path).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    });
    await this.#dirs.sync(dirname(path));
  }
}

import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { shardPath, type Oid } from '../protocol/oid.js';
import { DirSyncer } from './dir-sync.js';
import { RawChunkSource } from './raw-reader.js';
import { RawWriter } from './raw-writer.js';
import { StagingFile } from './staging-file.js';
import type { BlobReader, BlobStore, ObjectWriter, PutResult, WriterOptions } from './types.js';

/**
 * The shared content-addressed store on a local disk: `objects/ab/cd/<oid>`, one copy per oid.
 * Uploads stream into `staging/` (same file system, so the final rename is atomic), are verified,
 * fsync'd, then renamed into place; directory fsyncs are group-committed.
 */
export class DiskBlobStore implements BlobStore {
  readonly #objects: string;
  readonly #staging: string;
  readonly #dirs = new DirSyncer();
  /** Staging files this process is writing: never swept. */
  readonly #inFlight = new Set<string>();

  private constructor(root: string) {
    this.#objects = join(root, 'objects');
    this.#staging = join(root, 'staging');
  }

  static async open(root: string): Promise<DiskBlobStore> {
    const store = new DiskBlobStore(root);
    await mkdir(store.#objects, { recursive: true });
    await mkdir(store.#staging, { recursive: true });
    return store;
  }

  /** Final path of an oid; the Oid brand guarantees 64 hex digits, so no traversal is possible. */
  pathOf(oid: Oid): string {
    return join(this.#objects, shardPath(oid));
  }

  async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const file = await StagingFile.create(this.#staging, oid);
    this.#inFlight.add(file.path);
    const writer = new RawWriter(oid, options.expectedSize, file, (f, r) => this.#commit(oid, f, r));
    // Forget the staging path whatever the outcome.
    const forget = (): void => void this.#inFlight.delete(file.path);
    return {
      write: (c) => writer.write(c),
      onDrain: (l) => writer.onDrain(l),
      finish: () => writer.finish().finally(forget),
      abort: () => writer.abort().finally(forget),
    };
  }

  /** Renames a sealed staging file into place (unless the oid is already stored) and makes it durable. */
  async #commit(oid: Oid, file: StagingFile, r: Omit<PutResult, 'created'>): Promise<PutResult> {
    const final = this.pathOf(oid);
    const created = await mkdir(dirname(final), { recursive: true });
    if (created === undefined && (await exists(final))) {
      // Already stored (another repository or a concurrent PUT): keep one copy.
      await file.dispose();
      return { ...r, created: false };
    }
    await rename(file.path, final);
    file.keep();
    // A new fan-out directory must itself be made durable in its parent.
    const syncs = [this.#dirs.sync(dirname(final))];
    if (created !== undefined) syncs.push(this.#dirs.sync(dirname(dirname(final))), this.#dirs.sync(this.#objects));
    await Promise.all(syncs);
    return { ...r, created: true };
  }

  async open(oid: Oid): Promise<BlobReader | null> {
    let fh: FileHandle;
    try {
      fh = await open(this.pathOf(oid), 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    const { size } = await fh.stat();
    return {
      size,
      read: (start, end) => new RawChunkSource(fh.fd, start, end),
      close: () => fh.close(),
    };
  }

  async sweepStaging(maxAgeMs: number): Promise<number> {
    const cutoff = Date.now() - maxAgeMs;
    let removed = 0;
    for (const name of await readdir(this.#staging)) {
      const path = join(this.#staging, name);
      if (this.#inFlight.has(path)) continue;
      try {
        if ((await stat(path)).mtimeMs <= cutoff) {
          await unlink(path);
          removed++;
        }
      } catch {
        // Gone already, or not ours to remove: either way nothing to do.
      }
    }
    return removed;
  }

  async checkWritable(): Promise<void> {
    const probe = join(this.#staging, `.ready-${randomBytes(6).toString('hex')}`);
    const fh = await open(probe, 'wx');
    try {
      await fh.write('ok');
      await fh.datasync();
    } finally {
      await fh.close();
      await unlink(probe).catch(() => undefined);
    }
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

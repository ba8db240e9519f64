import { randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readdirSync, statSync } from 'node:fs';
import { link, mkdir, open, opendir, readdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parseOid, shardPath, type Oid } from '../protocol/oid.js';
import { IO_CHUNK } from './buffer-pool.js';
import { DirSyncer } from './dir-sync.js';
import { openOnThreadpool, plainReads } from './inline-reader.js';
import { LegacyFolders } from './legacy-folders.js';
import { StagedFileWriter } from './raw-writer.js';
import { StagingFile } from './staging-file.js';
import type { BlobReader, BlobStat, BlobStore, ObjectWriter, PutResult, StoredObject, WriterOptions } from './types.js';

/** Uploads from this size (or of unknown size) go past the page cache where their writes are aligned. */
const DIRECT_IO_MIN_SIZE = 8 << 20;

/**
 * The disk backend: one file per oid, `objects/ab/cd/<oid>`, holding exactly the bytes it was given
 * (the layers above decide what those are). A write streams into `staging/` (same file system, so
 * the final rename is atomic), is fsync'd, then renamed into place; directory fsyncs are
 * group-committed. Readers hold an open descriptor, so a delete or replace never cuts a download.
 */
export class DiskBlobStore implements BlobStore {
  readonly blockSize = IO_CHUNK;
  readonly presigner = null;
  readonly legacy: LegacyFolders;
  readonly #root: string;
  readonly #objects: string;
  readonly #staging: string;
  readonly #dirs = new DirSyncer();
  readonly #directIo: boolean;
  /** Staging files this process is writing: never swept. */
  readonly #inFlight = new Set<string>();

  private constructor(root: string, directIo: boolean) {
    this.#root = root;
    this.#objects = join(root, 'objects');
    this.#staging = join(root, 'staging');
    this.#directIo = directIo;
    this.legacy = new LegacyFolders(root, this.#dirs, (oid) => this.pathOf(oid));
  }

  static async open(root: string, options: { directIo?: boolean } = {}): Promise<DiskBlobStore> {
    const store = new DiskBlobStore(root, options.directIo ?? true);
    await mkdir(store.#objects, { recursive: true });
    await mkdir(store.#staging, { recursive: true });
    return store;
  }

  /** Final path of an oid; the Oid brand guarantees 64 hex digits, so no traversal is possible. */
  pathOf(oid: Oid): string {
    return join(this.#objects, shardPath(oid));
  }

  async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const size = options.expectedSize;
    // Large uploads bypass the page cache where their writes are aligned (see StagingFile); small
    // ones stay cached for the downloads that often follow them.
    const file = await StagingFile.create(this.#staging, oid, { direct: (size === null || size >= DIRECT_IO_MIN_SIZE) && this.#directIo });
    this.#inFlight.add(file.path);
    const writer = new StagedFileWriter(file, (f, storedSize) => this.#commit(oid, f, storedSize, options.replace === true));
    const forget = (): void => void this.#inFlight.delete(file.path);
    return {
      write: (c, r) => writer.write(c, r),
      onDrain: (l) => writer.onDrain(l),
      finish: () => writer.finish().finally(forget),
      abort: () => writer.abort().finally(forget),
    };
  }

  /**
   * Puts a sealed staging file in place and makes it durable. A new object is hard-linked to its
   * final name (link fails if the name exists, so of two concurrent writers of one oid exactly one
   * creates it, and the other's copy is dropped); a replacement is renamed over the old file.
   */
  async #commit(oid: Oid, file: StagingFile, storedSize: number, replace: boolean): Promise<PutResult> {
    const final = this.pathOf(oid);
    const created = await mkdir(dirname(final), { recursive: true });
    if (replace) await rename(file.path, final);
    else {
      try {
        await link(file.path, final);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        // Already stored (another repository or a concurrent PUT): keep one copy.
        await file.dispose();
        return { size: storedSize, storedSize, created: false };
      }
    }
    file.keep();
    // A new fan-out directory must itself be made durable in its parent.
    const syncs = [this.#dirs.sync(dirname(final))];
    if (created !== undefined) syncs.push(this.#dirs.sync(dirname(dirname(final))), this.#dirs.sync(this.#objects));
    if (!replace) syncs.push(unlink(file.path)); // the staging name; a crash leaves it for the start-up sweep
    await Promise.all(syncs);
    return { size: storedSize, storedSize, created: true };
  }

  async open(oid: Oid): Promise<BlobReader | null> {
    // In line (see inline-reader.ts): the open, fstat and close of a file whose inode and folders
    // are cached take a few µs each, less than one threadpool round trip; a clone opens one per object.
    // O_NONBLOCK: opening something that is not a regular file (a FIFO) must never wait on the event
    // loop; such a name is opened again on the threadpool, as any file was before.
    let fd: number;
    try {
      fd = openSync(this.pathOf(oid), constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    let size: number;
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) {
        closeSync(fd);
        return openOnThreadpool(this.pathOf(oid), null); // a blocking open waits on a libuv thread
      }
      size = st.size;
    } catch (e) {
      closeSync(fd);
      throw e;
    }
    // No metadata on disk: the compress layer probes for a frame trailer.
    return { size, storedSize: size, framed: null, ...plainReads(fd, size), close: async () => closeSync(fd) };
  }

  async stat(oid: Oid): Promise<BlobStat | null> {
    const st = await stat(this.pathOf(oid)).catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') return null;
      throw e;
    });
    return st === null ? null : { size: st.size, storedSize: st.size, framed: null };
  }

  async delete(oid: Oid): Promise<boolean> {
    const path = this.pathOf(oid);
    try {
      await unlink(path); // an open descriptor keeps the bytes for readers already reading
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
    await this.#dirs.sync(dirname(path));
    return true;
  }

  async *list(): AsyncIterable<StoredObject> {
    for (const a of await names(this.#objects)) {
      if (!/^[0-9a-f]{2}$/.test(a)) continue;
      for (const b of await names(join(this.#objects, a))) {
        if (!/^[0-9a-f]{2}$/.test(b)) continue;
        const dir = await opendir(join(this.#objects, a, b)).catch(() => null);
        if (dir === null) continue;
        for await (const e of dir) {
          const oid = parseOid(e.name);
          if (oid === null || !oid.startsWith(a + b) || !e.isFile()) continue;
          const st = await stat(join(this.#objects, a, b, e.name)).catch(() => null);
          if (st !== null) yield { oid, storedSize: st.size };
        }
      }
    }
  }

  /**
   * Moves an object's file out of `objects/` (kept under `quarantine/` for inspection), so the next
   * upload of the oid stores good bytes instead of finding the bad file "already stored".
   */
  async quarantine(oid: Oid): Promise<boolean> {
    const dir = join(this.#root, 'quarantine');
    await mkdir(dir, { recursive: true });
    try {
      await rename(this.pathOf(oid), join(dir, `${oid}.${Date.now()}`));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
    await Promise.all([this.#dirs.sync(dirname(this.pathOf(oid))), this.#dirs.sync(dir)]);
    return true;
  }

  /**
   * Object files no reference points to: an upload killed between its rename into `objects/` and its
   * journal record (never acknowledged, so its client sends it again), or a dedupe killed between
   * its link and its index row (the legacy file is still there). `isKnown` asks the index (after
   * journal replay) and the journal. Only meaningful while no upload or job runs: at start, with the
   * data directory locked.
   */
  async findOrphans(isKnown: (oid: Oid) => boolean | Promise<boolean>): Promise<{ path: string; size: number }[]> {
    // Directories are read synchronously: it runs before the server listens, when nothing else waits
    // on the event loop, and a threadpool round trip per directory would make the walk of a large
    // store several times slower.
    const out: { path: string; size: number }[] = [];
    const namesSync = (dir: string): string[] => {
      try {
        return readdirSync(dir);
      } catch {
        return [];
      }
    };
    for (const a of namesSync(this.#objects)) {
      if (!/^[0-9a-f]{2}$/.test(a)) continue;
      for (const b of namesSync(join(this.#objects, a))) {
        if (!/^[0-9a-f]{2}$/.test(b)) continue;
        for (const name of namesSync(join(this.#objects, a, b))) {
          const oid = parseOid(name);
          if (oid === null || !oid.startsWith(a + b) || (await isKnown(oid))) continue;
          const st = statSync(this.pathOf(oid), { throwIfNoEntry: false });
          if (st !== undefined && st.isFile()) out.push({ path: this.pathOf(oid), size: st.size });
        }
      }
    }
    return out;
  }

  /** Removes a file findOrphans listed and makes the removal durable. */
  async removeOrphan(path: string): Promise<void> {
    await this.legacy.purge(path);
  }

  /**
   * Start-up: removes every staging file and retain's `trash/` of earlier versions. With the data
   * directory locked (one process per data directory) each one belongs to a process that died.
   */
  async clearStaging(): Promise<number> {
    let removed = 0;
    for (const e of await readdir(this.#staging, { withFileTypes: true })) {
      if (!e.isFile()) continue; // .maintenance/ is the jobs' own, emptied when they start
      await unlink(join(this.#staging, e.name)).then(() => removed++, () => undefined);
    }
    if (removed > 0) await this.#dirs.sync(this.#staging);
    const trash = join(this.#root, 'trash');
    for (const name of await names(trash)) await unlink(join(trash, name)).catch(() => undefined);
    return removed;
  }

  async sweepStaging(maxAgeMs: number): Promise<number> {
    const cutoff = Date.now() - maxAgeMs;
    let removed = 0;
    for (const name of await readdir(this.#staging)) {
      const path = join(this.#staging, name);
      if (this.#inFlight.has(path)) continue;
      try {
        const st = await stat(path);
        if (st.isFile() && st.mtimeMs <= cutoff) {
          await unlink(path);
          removed++;
        }
      } catch {
        // Gone already, or not ours to remove: either way nothing to do.
      }
    }
    return removed;
  }

  /**
   * Does what an upload does, in small: a file created in `staging/`, written, fsync'd, renamed into
   * `objects/` (where an upload's rename makes its shard folder), then removed. Probing `staging/`
   * alone said "ready" while `objects/` refused every upload. The probe's name is no oid, so neither
   * findOrphans nor list() ever takes it for an object.
   */
  async checkWritable(): Promise<void> {
    const name = `.ready-${randomBytes(6).toString('hex')}`;
    const staged = join(this.#staging, name);
    const placed = join(this.#objects, name);
    try {
      const fh = await open(staged, 'wx');
      try {
        await fh.write('ok');
        await fh.datasync();
      } finally {
        await fh.close();
      }
      await rename(staged, placed);
      await unlink(placed);
    } finally {
      await unlink(staged).catch(() => undefined); // still there when the rename failed
    }
  }
}

async function names(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => []);
}


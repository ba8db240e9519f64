import { randomBytes } from 'node:crypto';
import { closeSync, constants, fdatasync, fstatSync, linkSync, mkdirSync, openSync, readdirSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { link, mkdir, open, opendir, readdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parseOid, shardPath, type Oid } from '../protocol/oid.js';
import { IO_CHUNK } from './buffer-pool.js';
import { DirSyncer } from './dir-sync.js';
import { INLINE_READ_MAX, openOnThreadpool, plainReads, readInLine, readWhole } from './inline-reader.js';
import { LegacyFolders } from './legacy-folders.js';
import { StagedFileWriter } from './staged-file-writer.js';
import { mapIoError, StagingFile, stagingPath } from './staging-file.js';
import { WholeObjectWriter } from './whole-object-writer.js';
import { writeFullySync } from '../util/write-fully.js';
import type { BlobReader, BlobStat, BlobStore, InLineObject, ObjectWriter, PutResult, StoredObject, WriterOptions } from './types.js';

/** Opening on the event loop: O_NONBLOCK, so a non-regular file (a FIFO) never waits there; open retries it on the threadpool. */
const READ_IN_LINE = constants.O_RDONLY | constants.O_NONBLOCK;

/** Uploads from this size (or of unknown size) go past the page cache where their writes are aligned. */
const DIRECT_IO_MIN_SIZE = 8 << 20;
const IN_LINE_WRITE_MAX = 256 << 10;

interface PlaceOps {
  mkdir(dir: string): Promise<string | undefined>;
  link(from: string, to: string): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
}
const ON_THREADPOOL: PlaceOps = { mkdir: (dir) => mkdir(dir, { recursive: true }), link, rename, unlink };
const IN_LINE: PlaceOps = {
  mkdir: async (dir) => mkdirSync(dir, { recursive: true }),
  link: async (from, to) => linkSync(from, to),
  rename: async (from, to) => renameSync(from, to),
  unlink: async (path) => unlinkSync(path),
};
type Staged = Pick<StagingFile, 'path' | 'keep' | 'dispose'>;

/**
 * The disk backend: one file per oid, `objects/ab/cd/<oid>`. A write streams into `staging/` (same
 * file system, so the rename is atomic), is fsync'd and renamed into place; folder fsyncs are
 * group-committed. Readers hold an open descriptor, so a delete never cuts a download.
 */
export class DiskBlobStore implements BlobStore {
  readonly kind = 'disk';
  readonly blockSize = IO_CHUNK;
  readonly presigner = null;
  readonly legacy: LegacyFolders;
  readonly journal = null;
  readonly #root: string;
  readonly #objects: string;
  readonly #staging: string;
  readonly #dirs = new DirSyncer();
  readonly #directIo: boolean;
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

  /** The Oid brand guarantees 64 hex digits, so no traversal is possible. */
  pathOf(oid: Oid): string {
    return join(this.#objects, shardPath(oid));
  }

  async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const size = options.expectedSize;
    const replace = options.replace === true;
    // A framed write's length is not the announced (logical) size.
    if (size !== null && size <= IN_LINE_WRITE_MAX && options.framed !== true) return new WholeObjectWriter(size, (data) => this.#writeInLine(oid, data, replace));
    // Large uploads bypass the page cache where aligned; small ones stay cached for the downloads that follow.
    const file = await StagingFile.create(this.#staging, oid, { direct: (size === null || size >= DIRECT_IO_MIN_SIZE) && this.#directIo });
    this.#inFlight.add(file.path);
    const writer = new StagedFileWriter(file, (f, storedSize) => this.#commit(oid, f, storedSize, replace, ON_THREADPOOL));
    const forget = (): void => void this.#inFlight.delete(file.path);
    return {
      write: (c, r) => writer.write(c, r),
      onDrain: (l) => writer.onDrain(l),
      finish: () => writer.finish().finally(forget),
      abort: () => writer.abort().finally(forget),
    };
  }

  /** Puts a sealed staging file in place, durably: a new object is hard-linked (of two writers one wins), a replacement renamed over. */
  async #commit(oid: Oid, file: Staged, storedSize: number, replace: boolean, ops: PlaceOps): Promise<PutResult> {
    const final = this.pathOf(oid);
    const created = await ops.mkdir(dirname(final));
    if (replace) await ops.rename(file.path, final);
    else {
      try {
        await ops.link(file.path, final);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        await file.dispose();
        return { size: storedSize, storedSize, created: false };
      }
    }
    file.keep();
    const syncs = [this.#dirs.sync(dirname(final))];
    if (created !== undefined) syncs.push(this.#dirs.sync(dirname(dirname(final))), this.#dirs.sync(this.#objects));
    if (!replace) syncs.push(ops.unlink(file.path)); // the staging name; a crash leaves it for the start-up sweep
    await Promise.all(syncs);
    return { size: storedSize, storedSize, created: true };
  }

  /** A small object written whole, in line but for the fdatasync and the folder fsyncs; durable as the streamed path is. */
  async #writeInLine(oid: Oid, data: Uint8Array, replace: boolean): Promise<PutResult> {
    const path = stagingPath(this.#staging, oid);
    let kept = false;
    const staged: Staged = {
      path,
      keep: () => void (kept = true),
      dispose: async () => {
        if (!kept) unlinkQuietly(path);
      },
    };
    this.#inFlight.add(path);
    try {
      let fd: number;
      try {
        fd = openSync(path, 'wx+', 0o644);
      } catch (e) {
        throw mapIoError(e);
      }
      try {
        writeFullySync(fd, data, 0);
        await new Promise<void>((resolve, reject) => fdatasync(fd, (e) => (e ? reject(e) : resolve())));
      } catch (e) {
        unlinkQuietly(path);
        throw mapIoError(e);
      } finally {
        closeSync(fd);
      }
      try {
        return await this.#commit(oid, staged, data.byteLength, replace, IN_LINE);
      } catch (e) {
        await staged.dispose();
        throw mapIoError(e);
      }
    } finally {
      this.#inFlight.delete(path);
    }
  }

  async open(oid: Oid): Promise<BlobReader | null> {
    // In line (see inline-reader.ts): cheaper than a threadpool round trip; a clone opens one per object.
    let fd: number;
    try {
      fd = openSync(this.pathOf(oid), READ_IN_LINE);
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
    if (size <= INLINE_READ_MAX) {
      try {
        return { size, storedSize: size, framed: null, ...readWhole(fd, size) };
      } finally {
        closeSync(fd);
      }
    }
    return { size, storedSize: size, framed: null, ...plainReads(fd, size), close: async () => closeSync(fd) };
  }

  openInLine(oid: Oid): InLineObject | undefined {
    // Whatever this cannot do at once (missing, an error, not regular or not small) is left to open.
    let fd: number;
    try {
      fd = openSync(this.pathOf(oid), READ_IN_LINE);
    } catch {
      return undefined;
    }
    try {
      const st = fstatSync(fd);
      return st.isFile() && st.size <= INLINE_READ_MAX ? readInLine(fd, st.size) : undefined;
    } catch {
      return undefined;
    } finally {
      closeSync(fd);
    }
  }

  async stat(oid: Oid): Promise<BlobStat | null> {
    let size: number;
    try {
      size = statSync(this.pathOf(oid)).size;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    return { size, storedSize: size, framed: null };
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

  /**
   * Every object file. Only a folder or file that is gone by the time it is read is passed over;
   * any other error ends the listing: a sweep (unused data keys, the cache ledger) must never take
   * an unreadable folder for an empty one.
   */
  async *list(): AsyncIterable<StoredObject> {
    for (const a of await namesIfThere(this.#objects)) {
      if (!/^[0-9a-f]{2}$/.test(a)) continue;
      for (const b of await namesIfThere(join(this.#objects, a))) {
        if (!/^[0-9a-f]{2}$/.test(b)) continue;
        const dir = await opendir(join(this.#objects, a, b)).catch(unlessGone);
        if (dir === null) continue;
        for await (const e of dir) {
          const oid = parseOid(e.name);
          if (oid === null || !oid.startsWith(a + b) || !e.isFile()) continue;
          const st = await stat(join(this.#objects, a, b, e.name)).catch(unlessGone);
          if (st !== null) yield { oid, storedSize: st.size };
        }
      }
    }
  }

  /** Moves an object's file to `quarantine/`, so the next upload stores good bytes instead of finding it "already stored". */
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

  /** Object files no reference points to (an upload or dedupe killed midway); only meaningful at start, locked. */
  async findOrphans(isKnown: (oid: Oid) => boolean | Promise<boolean>): Promise<{ path: string; size: number }[]> {
    // Synchronous: it runs before the server listens, and a threadpool round trip per folder would slow the walk.
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

  async removeOrphan(path: string): Promise<void> {
    await this.legacy.purge(path);
  }

  /** Start-up: removes every staging file and `trash/`; with the data directory locked, each belongs to a dead process. */
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
      }
    }
    return removed;
  }

  /** A small upload, probed at start: `staging/` alone can be writable while `objects/` is not. Its name is no oid. */
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

/** null for a file or folder that is not there (any more), or a file where a folder was looked for; rethrows every other error. */
function unlessGone(e: unknown): null {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') return null;
  throw e;
}

async function namesIfThere(dir: string): Promise<string[]> {
  return (await readdir(dir).catch(unlessGone)) ?? [];
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
  }
}

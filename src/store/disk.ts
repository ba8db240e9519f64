import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { shardPath, type Oid } from '../protocol/oid.js';
import type { WorkerPool } from '../workers/pool.js';
import { DirSyncer } from './dir-sync.js';
import { TRAILER_SIZE, INDEX_ENTRY_SIZE, decodeIndex, decodeTrailer, type FrameIndex } from './frame-format.js';
import { FramedChunkSource } from './framed-reader.js';
import { FramedWriter } from './framed-writer.js';
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

  readonly #pool: WorkerPool;
  /** zstd level for new objects, or null to store them as they arrive. */
  readonly #level: number | null;

  private constructor(root: string, pool: WorkerPool, level: number | null) {
    this.#objects = join(root, 'objects');
    this.#staging = join(root, 'staging');
    this.#pool = pool;
    this.#level = level;
  }

  static async open(root: string, options: { pool: WorkerPool; compressionLevel: number | null }): Promise<DiskBlobStore> {
    const store = new DiskBlobStore(root, options.pool, options.compressionLevel);
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
    const commit = (f: StagingFile, r: Omit<PutResult, 'created'>): Promise<PutResult> => this.#commit(oid, f, r);
    // Tiny objects are not worth a frame index; everything else is framed when compression is on.
    const framed = this.#level !== null && (options.expectedSize === null || options.expectedSize >= MIN_FRAMED_SIZE);
    const writer = framed
      ? new FramedWriter(oid, options.expectedSize, file, commit, this.#pool, this.#level!)
      : new RawWriter(oid, options.expectedSize, file, commit);
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
    try {
      const { size } = await fh.stat();
      const index = await readFrameIndex(fh, size);
      if (index !== null) {
        return {
          size: index.logicalSize,
          storedSize: size,
          framed: true,
          read: (start, end) => new FramedChunkSource(fh.fd, index, this.#pool, start, end),
          close: () => fh.close(),
        };
      }
      return { size, storedSize: size, framed: false, read: (start, end) => new RawChunkSource(fh.fd, start, end), close: () => fh.close() };
    } catch (e) {
      await fh.close();
      throw e;
    }
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

/** Objects smaller than this are always stored as they arrive. */
const MIN_FRAMED_SIZE = 4096;

/** The frame index of a framed file, or null for a plain object (see frame-format.ts). */
async function readFrameIndex(fh: FileHandle, fileSize: number): Promise<FrameIndex | null> {
  if (fileSize < TRAILER_SIZE) return null;
  const t = Buffer.alloc(TRAILER_SIZE);
  await fh.read(t, 0, TRAILER_SIZE, fileSize - TRAILER_SIZE);
  const trailer = decodeTrailer(t, fileSize);
  if (trailer === null) return null;
  const index = Buffer.alloc(trailer.frameCount * INDEX_ENTRY_SIZE);
  await fh.read(index, 0, index.length, trailer.indexOffset);
  return decodeIndex(index, trailer);
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

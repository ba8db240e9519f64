import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, open, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { isLfsError, lfsError } from '../errors/errors.js';
import { shardPath, type Oid } from '../protocol/oid.js';
import { DirSyncer } from './dir-sync.js';
import type { BlobReader, BlobStore, PutOptions, PutResult } from './types.js';
import { VerifyStream } from './verify-stream.js';

const IO_CHUNK = 1 << 20;

/**
 * The shared content-addressed store on a local disk: `objects/ab/cd/<oid>`, one copy per oid.
 * Uploads stream into `staging/` (same file system, so the final rename is atomic), are verified,
 * fsync'd, then renamed into place; the directory fsync is group-committed.
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

  /** Final path of an oid; the Oid brand guarantees it is 64 hex digits, so no traversal is possible. */
  pathOf(oid: Oid): string {
    return join(this.#objects, shardPath(oid));
  }

  async put(oid: Oid, body: Readable, options: PutOptions): Promise<PutResult> {
    const tmp = join(this.#staging, `${oid}.${randomBytes(8).toString('hex')}.part`);
    this.#inFlight.add(tmp);
    let fh: FileHandle | null = null;
    let placed = false;
    try {
      fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
      const verify = new VerifyStream(oid, options.expectedSize);
      // flush: the stream fsyncs before it closes the file, and pipeline resolves only after that.
      const sink = fh.createWriteStream({ highWaterMark: IO_CHUNK, flush: true });
      fh = null; // owned by the stream from here: it closes the file on finish and on error
      await pipeline(body, verify, sink, { signal: options.signal });
      const size = verify.count;
      const final = this.pathOf(oid);
      const created = await mkdir(dirname(final), { recursive: true });
      if (created === undefined && (await exists(final))) {
        // Already stored (by another repository or a concurrent PUT): keep one copy.
        return { size, storedSize: size, created: false };
      }
      await rename(tmp, final);
      placed = true;
      // A new fan-out directory must itself be made durable in its parent.
      const syncs = [this.#dirs.sync(dirname(final))];
      if (created !== undefined) syncs.push(this.#dirs.sync(dirname(dirname(final))), this.#dirs.sync(this.#objects));
      await Promise.all(syncs);
      return { size, storedSize: size, created: true };
    } catch (e) {
      throw mapStoreError(e, options.signal);
    } finally {
      this.#inFlight.delete(tmp);
      if (fh !== null) await fh.close().catch(() => undefined);
      if (!placed) await unlink(tmp).catch(() => undefined);
    }
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
      stream: (start, end) => fh.createReadStream({ start, end, highWaterMark: IO_CHUNK, autoClose: false }),
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

/** Store failures a client should see as themselves: verification errors, a full disk, an abort. */
function mapStoreError(e: unknown, signal: AbortSignal): unknown {
  if (isLfsError(e)) return e;
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return lfsError('LFS_ERR_STORAGE_FULL');
  if (signal.aborted || code === 'ABORT_ERR' || code === 'ERR_STREAM_PREMATURE_CLOSE') {
    return lfsError('LFS_ERR_UPLOAD_ABORTED');
  }
  return e;
}

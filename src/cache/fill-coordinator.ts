import { createHash, randomBytes } from 'node:crypto';
import { link, mkdir, open, readdir, rename, rm, stat, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { lfsError } from '../errors/errors.js';
import { parseOid, type Oid } from '../protocol/oid.js';
import { reserveReached } from '../store/disk-reserve.js';
import type { ChunkSource } from '../store/types.js';
import type { CacheLedger } from './cache-ledger.js';
import type { UpstreamAction, UpstreamClient } from './upstream-client.js';

/** Bytes one follower reads from the staging file at a time (its one buffer). */
const READ_CHUNK = 1 << 20;

/** What fills tell the metrics. */
export interface FillEvents {
  started(): void;
  ended(ok: boolean): void;
  /** Bytes that came over the upstream link. */
  fetched(bytes: number): void;
}

/** Beside the fills' staging folder: placed fills whose bytes are not yet known durable. */
const unsyncedDir = (fillsDir: string): string => join(dirname(fillsDir), 'unsynced');

/** Where a verified fill lands: the cache store's final path of an oid (DiskBlobStore.pathOf). */
export type FinalPath = (oid: Oid) => string;

/**
 * One object coming from the upstream into a staging file, read by every client that asked for it
 * while it arrives (followers). Its bytes enter the cache only once size and sha256 match; a
 * follower never gets the last chunk of its range before that, so no client's answer completes
 * with bytes that did not verify (a failed fill cuts them). A verified fill is placed in the store
 * (a hard link) before that verdict and made durable after it, so no client waits for its fdatasync.
 */
class Fill {
  readonly oid: Oid;
  readonly size: number;
  readonly #file: FileHandle;
  written = 0;
  state: 'filling' | 'done' | 'failed' = 'filling';
  failure: unknown = null;
  #waiters: (() => void)[] = [];
  /** Followers still reading, plus one for the fill itself: the file closes when none is left. */
  #users = 1;

  constructor(oid: Oid, size: number, file: FileHandle) {
    this.oid = oid;
    this.size = size;
    this.#file = file;
  }

  get file(): FileHandle {
    return this.#file;
  }

  /** Resolves at the next progress or end. */
  changed(): Promise<void> {
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  notify(): void {
    for (const w of this.#waiters.splice(0)) w();
  }

  /** A reader of bytes [start, end]; its close() must be called. */
  follow(start: number, end: number): ChunkSource {
    this.#users++;
    let pos = start;
    let buffer: Buffer | null = null;
    let closed = false;
    return {
      next: async () => {
        for (;;) {
          if (pos > end) return null;
          if (this.state === 'failed') throw this.failure;
          const available = Math.min(this.written, end + 1) - pos;
          const length = Math.min(available, READ_CHUNK);
          // The range's last chunk waits for the verdict: a failure then cuts the answer short.
          if (length > 0 && (pos + length <= end || this.state === 'done')) {
            buffer ??= Buffer.allocUnsafe(Math.min(READ_CHUNK, end - start + 1));
            const { bytesRead } = await this.#file.read(buffer, 0, length, pos);
            if (bytesRead !== length) throw lfsError('LFS_ERR_UPSTREAM_FAILED', 'The staging file of a fill was cut short');
            pos += length;
            return buffer.subarray(0, length);
          }
          await this.changed();
        }
      },
      close: async () => {
        if (closed) return;
        closed = true;
        await this.release();
      },
    };
  }

  async release(): Promise<void> {
    if (--this.#users === 0) await this.#file.close().catch(() => undefined);
  }
}

/**
 * Fetches objects the cache lacks from the upstream's download actions, one fetch per oid however
 * many clients ask at once (later ones follow the staging file from its start), and puts each into
 * the cache's store once verified (docs/cache.md, "Downloads").
 */
export class FillCoordinator {
  readonly #dir: string;
  readonly #finalPath: FinalPath;
  readonly #ledger: CacheLedger;
  readonly #upstream: UpstreamClient;
  readonly #events: FillEvents;
  readonly #fills = new Map<Oid, Promise<Fill>>();
  readonly #persisting = new Set<Promise<void>>();

  private constructor(dir: string, finalPath: FinalPath, ledger: CacheLedger, upstream: UpstreamClient, events: FillEvents) {
    this.#dir = dir;
    this.#finalPath = finalPath;
    this.#ledger = ledger;
    this.#upstream = upstream;
    this.#events = events;
  }

  /** `dir`: the fills' staging folder, on the cache store's file system, cleared by `recover` first. */
  static async open(dir: string, finalPath: FinalPath, ledger: CacheLedger, upstream: UpstreamClient, events: FillEvents): Promise<FillCoordinator> {
    await FillCoordinator.recover(dir, finalPath);
    return new FillCoordinator(dir, finalPath, ledger, upstream, events);
  }

  /**
   * Clears what a crash left in the staging and unsynced folders, before the ledger reads the
   * store; a name left there still linked to a placed object means its bytes may not have reached
   * the disk, so that object goes too (it is fetched again when asked for).
   */
  static async recover(dir: string, finalPath: FinalPath): Promise<void> {
    // The staging folder too: a crash may have kept the link into the store but not the rename.
    for (const folder of [dir, unsyncedDir(dir)]) {
      await mkdir(folder, { recursive: true });
      for (const name of await readdir(folder)) {
        const staged = join(folder, name);
        const oid = parseOid(name.split('.')[0]);
        if (oid !== null) {
          const [a, b] = await Promise.all([stat(staged).catch(() => null), stat(finalPath(oid)).catch(() => null)]);
          if (a !== null && b !== null && a.ino === b.ino && a.dev === b.dev) await rm(finalPath(oid), { force: true });
        }
        await rm(staged, { force: true });
      }
    }
  }

  get inFlight(): number {
    return this.#fills.size;
  }

  /**
   * A reader of bytes [start, end] of `oid`, filled from `action` unless a fill of it is running
   * already (then that one is followed). Throws 507 when the cache cannot make room for it.
   */
  async follow(oid: Oid, size: number, action: UpstreamAction, start: number, end: number): Promise<ChunkSource> {
    let fill = this.#fills.get(oid);
    if (fill === undefined) {
      fill = this.#start(oid, size, action);
      this.#fills.set(oid, fill);
      fill.catch(() => this.#fills.delete(oid));
    }
    const f = await fill;
    if (f.size !== size) throw lfsError('LFS_ERR_SIZE_MISMATCH', 'A fill of this object with another size is running');
    return f.follow(start, end);
  }

  async #start(oid: Oid, size: number, action: UpstreamAction): Promise<Fill> {
    // Larger than the whole cache: streamed through the staging file, never kept.
    const keep = size <= this.#ledger.maxSize;
    const room = keep ? await this.#ledger.promise(size) : await this.#ledger.passThrough(size);
    if (room === null) throw reserveReached();
    const unpin = this.#ledger.pin(oid);
    const path = join(this.#dir, `${oid}.${randomBytes(6).toString('hex')}`);
    let file: FileHandle;
    try {
      file = await open(path, 'w+');
    } catch (e) {
      room();
      unpin();
      throw e;
    }
    const fill = new Fill(oid, size, file);
    this.#events.started();
    let placed = false;
    void this.#run(fill, path, action, keep).then(
      (ours) => {
        placed = ours;
        if (keep) this.#ledger.add(oid, size);
      },
      (e: unknown) => {
        fill.failure = e;
        fill.state = 'failed';
      },
    ).finally(() => {
      room();
      unpin();
      if (fill.state === 'filling') fill.state = 'done';
      this.#events.ended(fill.state === 'done');
      this.#fills.delete(oid);
      fill.notify();
      if (!placed) return void fill.release();
      // Clients are not kept waiting for the fdatasync: the verdict was the sha256's.
      const persisting = this.#persist(fill, path);
      this.#persisting.add(persisting);
      void persisting.finally(() => this.#persisting.delete(persisting));
    });
    return fill;
  }

  /** True when the verified bytes were placed in the store as the staging file's inode (not found there already). */
  async #run(fill: Fill, path: string, action: UpstreamAction, keep: boolean): Promise<boolean> {
    let placed = false;
    try {
      const answer = await this.#upstream.download(action);
      const hash = createHash('sha256');
      try {
        for await (const chunk of answer.body as AsyncIterable<Buffer>) {
          if (fill.written + chunk.byteLength > fill.size) throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream sent more than the object's ${fill.size} bytes`);
          hash.update(chunk);
          let off = 0;
          while (off < chunk.byteLength) {
            const { bytesWritten } = await fill.file.write(chunk, off, chunk.byteLength - off, fill.written + off);
            off += bytesWritten;
          }
          fill.written += chunk.byteLength;
          this.#events.fetched(chunk.byteLength);
          fill.notify();
        }
      } finally {
        // A body given up early errors as it is destroyed: nobody else listens.
        answer.body.on('error', () => undefined);
        answer.body.destroy();
      }
      if (fill.written !== fill.size) throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream sent ${fill.written} of the object's ${fill.size} bytes`);
      if (hash.digest('hex') !== fill.oid) throw lfsError('LFS_ERR_UPSTREAM_FAILED', 'The upstream sent bytes that do not match the oid');
      if (!keep) return false;
      const final = this.#finalPath(fill.oid);
      await mkdir(dirname(final), { recursive: true });
      const ours = await link(path, final).then(
        () => true,
        (e: NodeJS.ErrnoException) => {
          if (e.code !== 'EEXIST') throw e;
          return false;
        },
      );
      if (!ours) return false;
      // Until its bytes are durable (#persist), the placed copy is named in the unsynced folder: a
      // crash before that removes it at the next start.
      await rename(path, this.#unsyncedOf(path)).catch(async (e: unknown) => {
        await rm(final, { force: true });
        throw e;
      });
      placed = true;
      return true;
    } finally {
      // Followers read through their open descriptor.
      if (!placed) await unlink(path).catch(() => undefined);
      fill.notify();
    }
  }

  #unsyncedOf(path: string): string {
    return join(unsyncedDir(this.#dir), basename(path));
  }

  /** Makes a placed fill's bytes durable, then drops its unsynced name; on failure the name stays (see recover). */
  async #persist(fill: Fill, path: string): Promise<void> {
    try {
      await fill.file.datasync();
      await unlink(this.#unsyncedOf(path));
    } catch {
      // The next start removes the copy the unsynced name still points at.
    } finally {
      await fill.release();
    }
  }

  /** Waits for the fills being made durable (a clean stop leaves nothing for recover). */
  async close(): Promise<void> {
    await Promise.all([...this.#persisting]);
  }
}

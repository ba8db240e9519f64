import { createHash, randomBytes } from 'node:crypto';
import { link, mkdir, open, readdir, rm, unlink, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import { reserveReached } from '../store/disk-reserve.js';
import type { ChunkSource } from '../store/types.js';
import type { CacheLedger } from './cache-ledger.js';
import type { UpstreamAction, UpstreamClient } from './upstream-client.js';

/** Bytes one follower reads from the staging file at a time (its one buffer). */
const READ_CHUNK = 1 << 20;
/**
 * A fill's bytes are flushed to disk in the background every this many bytes, so that the
 * fdatasync its verdict waits for (and with it the last chunk of every client's answer) has at most
 * this much left to write, not the whole object.
 */
const SYNC_EVERY = 32 << 20;

/** What fills tell the metrics. */
export interface FillEvents {
  started(): void;
  ended(ok: boolean): void;
  /** Bytes that came over the upstream link. */
  fetched(bytes: number): void;
}

/** Where a verified fill lands: the cache store's final path of an oid (DiskBlobStore.pathOf). */
export type FinalPath = (oid: Oid) => string;

/**
 * One object coming from the upstream into a staging file, read by every client that asked for it
 * while it arrives (followers). Its bytes enter the cache only once size and sha256 match; a
 * follower never gets the last chunk of its range before that, so no client's answer completes
 * with bytes that did not verify (a failed fill cuts them).
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

  private constructor(dir: string, finalPath: FinalPath, ledger: CacheLedger, upstream: UpstreamClient, events: FillEvents) {
    this.#dir = dir;
    this.#finalPath = finalPath;
    this.#ledger = ledger;
    this.#upstream = upstream;
    this.#events = events;
  }

  /** `dir`: the fills' staging folder, on the cache store's file system; what a crash left there is removed. */
  static async open(dir: string, finalPath: FinalPath, ledger: CacheLedger, upstream: UpstreamClient, events: FillEvents): Promise<FillCoordinator> {
    await mkdir(dir, { recursive: true });
    for (const name of await readdir(dir)) await rm(join(dir, name), { force: true });
    return new FillCoordinator(dir, finalPath, ledger, upstream, events);
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
    void this.#run(fill, path, action, keep).then(
      () => {
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
      void fill.release();
    });
    return fill;
  }

  async #run(fill: Fill, path: string, action: UpstreamAction, keep: boolean): Promise<void> {
    let placed = false;
    try {
      const answer = await this.#upstream.download(action);
      const hash = createHash('sha256');
      let syncing: Promise<void> | null = null;
      let syncedTo = 0;
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
          if (keep && syncing === null && fill.written - syncedTo >= SYNC_EVERY) {
            const upTo = fill.written;
            // One flush at a time, not awaited here; a failure shows again in the final fdatasync.
            syncing = fill.file.datasync().then(
              () => {
                syncedTo = upTo;
                syncing = null;
              },
              () => {
                syncing = null;
              },
            );
          }
        }
        await syncing;
      } finally {
        // A body given up early errors as it is destroyed: nobody else listens.
        answer.body.on('error', () => undefined);
        answer.body.destroy();
      }
      if (fill.written !== fill.size) throw lfsError('LFS_ERR_UPSTREAM_FAILED', `The upstream sent ${fill.written} of the object's ${fill.size} bytes`);
      if (hash.digest('hex') !== fill.oid) throw lfsError('LFS_ERR_UPSTREAM_FAILED', 'The upstream sent bytes that do not match the oid');
      if (!keep) return;
      await fill.file.datasync();
      const final = this.#finalPath(fill.oid);
      await mkdir(dirname(final), { recursive: true });
      await link(path, final).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== 'EEXIST') throw e;
      });
      placed = true;
    } finally {
      // Verified or not, the staging name goes; followers read through their open descriptor.
      await unlink(path).catch(() => undefined);
      if (!placed) fill.notify();
    }
  }
}

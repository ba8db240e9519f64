import { createHash } from 'node:crypto';
import { write as fsWrite } from 'node:fs';
import { mkdir, open, readdir, rm, stat, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { ObjectIndex } from '../db/index-types.js';
import type { ResumableHasher, ResumableStreamHasher } from '../format/frame-codec.js';
import { lfsError } from '../errors/errors.js';
import type { Oid } from '../protocol/oid.js';
import { parseOid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import { mapIoError } from '../store/staging-file.js';
import type { ObjectWriter, PutResult } from '../store/types.js';
import type { UploadJudge } from './access-service.js';
import type { UploadLimits } from './settings-service.js';
import type { TransferService, UploadBody } from './transfer-service.js';
import { log as defaultLog } from '../util/log.js';
import { isSavedStateOf } from '../workers/sha256-state.js';

/** The tus protocol version spoken (https://tus.io/protocols/resumable-upload, 1.0.0). */
export const TUS_VERSION = '1.0.0';

/** Received bytes are made durable (and the offset a HEAD reports moved on) at least every this many. */
const SYNC_EVERY = 64 << 20;
/** Bytes copied and waiting for the disk before the socket is paused; it resumes below half. */
const MAX_QUEUED = 8 << 20;
/**
 * Bytes taken past the last sync before the socket is paused until the next one: what a crash can
 * cost a resume. Without it, a fast link fills the page cache far ahead of the disk (seen: a HEAD
 * after a kill at 563 MB reported 268 MB).
 */
const MAX_UNSYNCED = 4 * SYNC_EVERY;
/** The state record: one sector, written in place, so an update is never half there. */
const STATE_BYTES = 512;
/** Batch answers remembered for their first HEAD (a push's objects; the oldest go first). */
const MAX_ANNOUNCED = 100_000;
/** The saved sha256 state of no bytes (src/native/sha256.cc's format). */
export const EMPTY_STATE = Uint8Array.from(Buffer.from('6a09e667bb67ae853c6ef372a54ff53a510e527f9b05688c1f83d9ab5be0cd190000000000000000', 'hex'));
/** Bytes read from a finished upload at a time on its way into the store. */
const READ_CHUNK = 1 << 20;

interface Upload {
  readonly stem: string;
  readonly repo: RepoName;
  readonly oid: Oid;
  readonly size: number;
  /** Bytes that survive a crash: the offset HEAD reports. */
  synced: number;
  /** The sha256 state after the `synced` bytes (the hasher's saved state), kept with them. */
  hashState: Uint8Array;
  /** The PATCH appending now, or null. */
  run: PatchRun | null;
  /** The store's write of the finished upload, while it runs. */
  finishing: Promise<void> | null;
  /** When bytes last arrived (ms): the sweep's clock. */
  touched: number;
}

/**
 * What the tus routes, the batch, retain, quotas and metrics use of partial uploads, whether they
 * live in one node's data directory (ResumableUploads) or in the index and the bucket shared by
 * every node (SharedResumableUploads).
 */
export interface TusUploads {
  /** The batch offered a tus upload of `oid` to `repo`: its first HEAD or PATCH may begin it. */
  announce(repo: RepoName, oid: Oid, size: number): void | Promise<void>;
  /** The durable offset and the announced size; an object the repository holds reports its size; null when never offered. */
  status(repo: RepoName, oid: Oid): Promise<{ offset: number; size: number } | null>;
  /** Appends a PATCH body at `offset`; answers the new durable offset (the size once stored). */
  patch(repo: RepoName, oid: Oid, offset: number, body: UploadBody, judge: UploadJudge | null): Promise<number>;
  /** Drops the partial upload; false when there was none. */
  terminate(repo: RepoName, oid: Oid): Promise<boolean>;
  /** Removes partial uploads no byte reached for SVC_UPLOAD_RESUME_TTL; returns how many. */
  sweep(now?: number): Promise<number>;
  /** Durable bytes of `repoKey`'s partial uploads but for `except`'s (its quota counts them). */
  bytesOf(repoKey: string, except: Oid): number | Promise<number>;
  /** Retain: see PartialUploadSweep. */
  dropUnkept(repoKey: string, keep: ReadonlySet<Oid>, before: number, dryRun: boolean): Promise<number>;
  figures(): { count: number; bytes: number } | Promise<{ count: number; bytes: number }>;
}

export interface ResumableParts {
  readonly objects: ObjectIndex;
  readonly transfers: TransferService;
  /** Hashes each PATCH's bytes as they are written; its saved state goes with every durable offset. */
  readonly hasher: ResumableHasher;
  readonly limits?: UploadLimits | null;
  /** SVC_UPLOAD_RESUME_TTL in seconds. */
  readonly ttlSeconds: number;
  readonly log?: (msg: string, fields: object) => void;
}

/** Where one repository's partial upload of one oid lives: the repository's name hashed (no path characters), then the oid. */
export function stemOf(repoKey: string, oid: Oid): string {
  return `${createHash('sha256').update(repoKey).digest('hex').slice(0, 24)}-${oid}`;
}

/**
 * Partial uploads of the tus transfer (docs/resumable-uploads.md), on one node with the disk store:
 * each a file under `uploads/` in the data directory, with a state record beside it holding the
 * repository, oid, announced size and the durable offset. A partial upload belongs to one
 * repository and one oid (another repository cannot resume it: it must prove it holds every byte),
 * is invisible to batch and GET, and becomes an object only through TransferService.upload, read
 * back from the file, so it is stored exactly as a PUT. Its bytes are hashed once, as they are
 * written: the hash state is saved with each durable offset, so neither a resume nor the finish
 * reads the prefix back to hash it (the store is handed the digest instead).
 */
export class ResumableUploads implements TusUploads {
  readonly #dir: string;
  readonly #objects: ObjectIndex;
  readonly #transfers: TransferService;
  readonly #hasher: ResumableHasher;
  readonly #limits: UploadLimits | null;
  readonly #ttlMs: number;
  readonly #log: (msg: string, fields: object) => void;
  readonly #uploads = new Map<string, Upload>();
  /** Sizes the batch announced per upload (stem), until their first HEAD or PATCH. */
  readonly #announced = new Map<string, { repo: RepoName; oid: Oid; size: number }>();

  private constructor(dir: string, parts: ResumableParts) {
    this.#dir = dir;
    this.#objects = parts.objects;
    this.#transfers = parts.transfers;
    this.#hasher = parts.hasher;
    this.#limits = parts.limits ?? null;
    this.#ttlMs = parts.ttlSeconds * 1000;
    this.#log = parts.log ?? defaultLog;
  }

  /** Opens `dataDir/uploads`: partial uploads a previous run left are kept up to their durable offset, or swept when past the TTL. */
  static async open(dataDir: string, parts: ResumableParts, parseRepo: (key: string) => RepoName | null): Promise<ResumableUploads> {
    const dir = join(dataDir, 'uploads');
    await mkdir(dir, { recursive: true });
    const me = new ResumableUploads(dir, parts);
    for (const name of await readdir(dir)) {
      if (!name.endsWith('.state')) continue;
      const stem = name.slice(0, -'.state'.length);
      try {
        const u = await me.#load(stem, parseRepo);
        if (u === null) await me.#removeFiles(stem);
        else me.#uploads.set(stem, u);
      } catch (e) {
        me.#log('a partial upload could not be read back: removed', { level: 'warn', stem, err: String(e) });
        await me.#removeFiles(stem);
      }
    }
    // Data files without a state record: a crash between creating the two.
    for (const name of await readdir(dir)) {
      if (name.endsWith('.part') && !me.#uploads.has(name.slice(0, -'.part'.length))) await unlink(join(dir, name)).catch(() => undefined);
    }
    await me.sweep();
    return me;
  }

  async #load(stem: string, parseRepo: (key: string) => RepoName | null): Promise<Upload | null> {
    const fh = await open(join(this.#dir, `${stem}.state`), 'r');
    let record: { repo?: unknown; oid?: unknown; size?: unknown; synced?: unknown; hash?: unknown };
    let mtimeMs: number;
    try {
      const buf = Buffer.alloc(STATE_BYTES);
      await fh.read(buf, 0, STATE_BYTES, 0);
      record = JSON.parse(buf.toString('utf8').trimEnd()) as typeof record;
      mtimeMs = (await fh.stat()).mtimeMs;
    } finally {
      await fh.close();
    }
    const repo = typeof record.repo === 'string' ? parseRepo(record.repo) : null;
    const oid = parseOid(record.oid);
    const { size, synced } = record;
    if (repo === null || oid === null || typeof size !== 'number' || typeof synced !== 'number' || synced > size || stemOf(repo.key, oid) !== stem) return null;
    const data = await stat(join(this.#dir, `${stem}.part`)).catch(() => null);
    if (data === null || data.size < synced) return null;
    // Bytes past the durable offset may be torn by the crash: dropped, the client sends them again.
    if (data.size > synced) {
      const d = await open(join(this.#dir, `${stem}.part`), 'r+');
      try {
        await d.truncate(synced);
        await d.datasync();
      } finally {
        await d.close();
      }
    }
    const touched = Math.max(mtimeMs, data.mtimeMs);
    const u: Upload = { stem, repo, oid, size, synced, hashState: EMPTY_STATE, run: null, finishing: null, touched };
    const saved = typeof record.hash === 'string' ? Buffer.from(record.hash, 'base64') : null;
    // Without the hash state of its bytes the upload cannot go on (a record of an older version).
    if (saved === null || !isSavedStateOf(saved, synced)) return null;
    u.hashState = saved;
    return u;
  }

  /** The batch offered a tus upload of `oid` to `repo`: its first HEAD or PATCH may begin it. */
  announce(repo: RepoName, oid: Oid, size: number): void {
    const stem = stemOf(repo.key, oid);
    this.#announced.delete(stem);
    this.#announced.set(stem, { repo, oid, size });
    if (this.#announced.size > MAX_ANNOUNCED) this.#announced.delete(this.#announced.keys().next().value!);
  }

  /** Durable bytes of `repoKey`'s partial uploads, but for the one of `except` (its quota counts them). */
  bytesOf(repoKey: string, except: Oid): number {
    let bytes = 0;
    for (const u of this.#uploads.values()) if (u.repo.key === repoKey && u.oid !== except) bytes += u.synced;
    return bytes;
  }

  /**
   * Retain: removes `repoKey`'s partial uploads of oids not in `keep`, untouched since `before` and
   * with no PATCH running or finishing; returns how many (would go, in a dry run).
   */
  async dropUnkept(repoKey: string, keep: ReadonlySet<Oid>, before: number, dryRun: boolean): Promise<number> {
    let dropped = 0;
    for (const u of [...this.#uploads.values()]) {
      if (u.repo.key !== repoKey || keep.has(u.oid) || u.touched >= before || u.run !== null || u.finishing !== null) continue;
      dropped++;
      if (!dryRun) await this.#drop(u);
    }
    return dropped;
  }

  /** Partial uploads kept and the durable bytes they hold (metrics). */
  figures(): { count: number; bytes: number } {
    let bytes = 0;
    for (const u of this.#uploads.values()) bytes += u.synced;
    return { count: this.#uploads.size, bytes };
  }

  /**
   * Where an upload of `oid` to `repo` stands: its durable offset and size. An object the
   * repository already holds reports its whole size (the client goes on to verify); null when the
   * batch never offered it (404).
   */
  async status(repo: RepoName, oid: Oid): Promise<{ offset: number; size: number } | null> {
    const stem = stemOf(repo.key, oid);
    const u = this.#uploads.get(stem) ?? (await this.#begin(stem));
    if (u !== null) {
      // A client asks where its upload stands when it starts (again): a PATCH still running is one it
      // gave up on, and the server may not have seen that connection drop yet. Stopped, it syncs every
      // byte it wrote, so the answer is all of them, not the last periodic sync (up to SYNC_EVERY back).
      const running = u.run;
      if (running !== null) {
        running.stop();
        await running.settled;
      }
      if (u.finishing !== null) await u.finishing.catch(() => undefined);
      if (this.#uploads.get(stem) === u) return { offset: u.synced, size: u.size };
    }
    const row = (await this.#objects.findManyInRepo(repo.key, [oid])).get(oid);
    return row === undefined ? null : { offset: row.size, size: row.size };
  }

  /** Begins the upload the batch announced: its files, created empty and durable. Null when none was announced. */
  async #begin(stem: string): Promise<Upload | null> {
    const a = this.#announced.get(stem);
    if (a === undefined) return null;
    // Stored meanwhile (another push of the same repository): nothing to begin.
    if ((await this.#objects.findManyInRepo(a.repo.key, [a.oid])).has(a.oid)) return null;
    const raced = this.#uploads.get(stem);
    if (raced !== undefined) return raced;
    // The access settings as for a PUT: max object size and the repository's quota.
    await this.#limits?.admitPut(a.repo, a.oid, a.size);
    const u: Upload = { stem, repo: a.repo, oid: a.oid, size: a.size, synced: 0, hashState: EMPTY_STATE, run: null, finishing: null, touched: Date.now() };
    this.#uploads.set(stem, u);
    try {
      const data = await open(join(this.#dir, `${stem}.part`), 'w');
      await data.close();
      await this.#persist(u, 0, EMPTY_STATE, 'w');
      const dir = await open(this.#dir, 'r');
      await dir.sync().finally(() => dir.close());
    } catch (e) {
      this.#uploads.delete(stem);
      await this.#removeFiles(stem);
      throw mapIoError(e);
    }
    this.#announced.delete(stem);
    return u;
  }

  /** Writes the state record in place and makes it durable: the durable offset and the hash state after it. */
  async #persist(u: Upload, synced: number, hashState: Uint8Array, flags: 'w' | 'r+' = 'r+'): Promise<void> {
    const json = JSON.stringify({ repo: u.repo.key, oid: u.oid, size: u.size, synced, hash: Buffer.from(hashState).toString('base64') });
    const buf = Buffer.alloc(STATE_BYTES, 0x20);
    buf.write(json, 'utf8');
    const fh = await open(join(this.#dir, `${u.stem}.state`), flags);
    try {
      await fh.write(buf, 0, STATE_BYTES, 0);
      await fh.datasync();
    } finally {
      await fh.close();
    }
  }

  /**
   * Appends a PATCH body at `offset` and answers the new durable offset. An offset past the durable
   * one is 409; one before it (a client that resumed from an older HEAD) rewrites from there. A PATCH
   * still running on the same upload is stopped first (its bytes kept): the client that sent it has
   * given up on it. The last byte makes the store verify and keep the object.
   */
  async patch(repo: RepoName, oid: Oid, offset: number, body: UploadBody, judge: UploadJudge | null): Promise<number> {
    const stem = stemOf(repo.key, oid);
    let u = this.#uploads.get(stem) ?? (await this.#begin(stem));
    if (u === null) {
      const done = await this.status(repo, oid);
      if (done === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND', 'No upload of this object was offered to this repository: ask the batch first');
      if (offset !== done.offset) throw tusConflict(done.offset);
      await drain(body);
      return done.offset;
    }
    const previous = u.run;
    if (previous !== null) {
      previous.stop();
      await previous.settled;
    }
    if (u.finishing !== null) {
      await u.finishing;
      return this.patch(repo, oid, offset, body, judge);
    }
    if (this.#uploads.get(stem) !== u) u = this.#uploads.get(stem) ?? null;
    if (u === null || u.run !== null) throw lfsError('LFS_ERR_NOT_READY', 'Another request took over this upload; ask where it stands (HEAD) and resume', { 'Retry-After': '1' });
    // tus: the offset must be the bytes held. One before them (a client resuming from an older HEAD)
    // would need the hash state at that offset, which is not kept: it asks again and goes on from here.
    if (offset !== u.synced) throw tusConflict(u.synced);
    this.#transfers.admitBytes(u.size - offset);
    const claimed = u;
    const run = new PatchRun(join(this.#dir, `${stem}.part`), offset, u.size, this.#hasher.openResumable(u.hashState), u.hashState, async (end, state) => {
      await this.#persist(claimed, end, state);
      claimed.synced = end;
      claimed.hashState = state;
      claimed.touched = Date.now();
    });
    u.run = run;
    let failure: unknown = null;
    try {
      await run.start();
      const feeding = body.into(run);
      // Once stopped, the body is left unread: what it ends with is nobody's business.
      feeding.catch(() => undefined);
      await Promise.race([feeding, run.stopped]);
    } catch (e) {
      failure = e;
    }
    try {
      await run.complete(failure !== null && isOverrun(failure));
    } finally {
      if (u.run === run) u.run = null;
      run.resolveSettled();
    }
    if (failure !== null) throw failure;
    if (run.wasStopped) throw lfsError('LFS_ERR_NOT_READY', 'Another request took over this upload; ask where it stands (HEAD) and resume', { 'Retry-After': '1' });
    if (u.synced === u.size) await this.#finish(u, judge);
    return u.synced;
  }

  /**
   * Every byte is there: its digest (from the saved hash state: nothing is read back to hash it) must
   * be the oid; then into the store as a PUT would be, and gone from here.
   */
  #finish(u: Upload, judge: UploadJudge | null): Promise<void> {
    u.finishing ??= (async () => {
      const path = join(this.#dir, `${u.stem}.part`);
      try {
        const sha256 = await this.#hasher.openResumable(u.hashState).digest();
        if (sha256 !== u.oid) throw lfsError('LFS_ERR_DIGEST_MISMATCH', `Content hashes to ${sha256}, not to the oid ${u.oid}`);
        await this.#transfers.upload(u.repo, u.oid, fileBody(path, u.size, sha256), u.size, judge);
      } catch (e) {
        const code = (e as { code?: unknown }).code;
        // Bytes that are not the object are no use to a resume: dropped, the client starts again.
        if (code === 'LFS_ERR_DIGEST_MISMATCH' || code === 'LFS_ERR_SIZE_MISMATCH') await this.#drop(u);
        throw e;
      }
      await this.#drop(u);
    })().finally(() => {
      u.finishing = null;
    });
    return u.finishing;
  }

  /** The termination extension: the partial upload is dropped. False when there was none. */
  async terminate(repo: RepoName, oid: Oid): Promise<boolean> {
    const u = this.#uploads.get(stemOf(repo.key, oid));
    if (u === undefined) return false;
    if (u.run !== null) {
      u.run.stop();
      await u.run.settled;
    }
    if (u.finishing !== null) await u.finishing.catch(() => undefined);
    await this.#drop(u);
    return true;
  }

  async #drop(u: Upload): Promise<void> {
    if (this.#uploads.get(u.stem) === u) this.#uploads.delete(u.stem);
    await this.#removeFiles(u.stem);
  }

  async #removeFiles(stem: string): Promise<void> {
    // The state record first: without it the data file is litter the next start removes.
    await rm(join(this.#dir, `${stem}.state`), { force: true }).catch(() => undefined);
    await rm(join(this.#dir, `${stem}.part`), { force: true }).catch(() => undefined);
  }

  /** Removes partial uploads no byte reached for SVC_UPLOAD_RESUME_TTL; returns how many. */
  async sweep(now = Date.now()): Promise<number> {
    let removed = 0;
    for (const u of [...this.#uploads.values()]) {
      if (u.run !== null || u.finishing !== null || now - u.touched < this.#ttlMs) continue;
      await this.#drop(u);
      removed++;
    }
    if (removed > 0) this.#log('partial uploads past SVC_UPLOAD_RESUME_TTL removed', { removed });
    return removed;
  }
}

const noop = (): void => undefined;

export function tusConflict(offset: number): Error {
  return lfsError('LFS_ERR_UPLOAD_OFFSET_MISMATCH', `Upload-Offset must be ${offset}, the bytes this server holds`, { 'Upload-Offset': String(offset), 'Tus-Resumable': TUS_VERSION });
}

function isOverrun(e: unknown): boolean {
  return (e as { code?: unknown }).code === 'LFS_ERR_BODY_TOO_LARGE';
}

/** Reads a body that carries nothing to keep (a PATCH of an upload already complete). */
export async function drain(body: UploadBody): Promise<void> {
  const sink: ObjectWriter = {
    write: (chunk) => {
      if (chunk.byteLength > 0) throw lfsError('LFS_ERR_BODY_TOO_LARGE', 'This upload is complete: no more bytes are taken');
      return true;
    },
    onDrain: () => undefined,
    finish: () => Promise.reject(new Error('not used')),
    abort: () => Promise.resolve(),
  };
  await body.into(sink);
}

/** A finished partial upload, read back as the body of TransferService.upload; `sha256`: its digest, already checked. */
function fileBody(path: string, size: number, sha256: string): UploadBody {
  return {
    sha256,
    async into(writer: ObjectWriter): Promise<void> {
      const fh = await open(path, 'r');
      try {
        const buf = Buffer.allocUnsafe(READ_CHUNK);
        let drained: (() => void) | null = null;
        writer.onDrain(() => drained?.());
        for (let at = 0; at < size; ) {
          const { bytesRead } = await fh.read(buf, 0, Math.min(READ_CHUNK, size - at), at);
          if (bytesRead === 0) throw lfsError('LFS_ERR_SIZE_MISMATCH', 'The partial upload is shorter than its size');
          at += bytesRead;
          // Without `release` the writer copies what it keeps: the buffer is free again on return.
          if (!writer.write(buf.subarray(0, bytesRead))) await new Promise<void>((resolve) => (drained = resolve));
          drained = null;
        }
      } finally {
        await fh.close();
      }
    },
  };
}

/**
 * One PATCH's bytes appended to the partial upload's file: an ObjectWriter for BodyPump (which
 * pauses the socket while MAX_QUEUED bytes wait for the disk), one write in flight at a time, each
 * written buffer hashed next, the file made durable every SYNC_EVERY bytes and at the end, each time
 * followed by the state record with the hash state after exactly the bytes synced.
 */
class PatchRun implements ObjectWriter {
  readonly #path: string;
  readonly #size: number;
  readonly #durable: (end: number, hashState: Uint8Array) => Promise<void>;
  readonly #start: number;
  readonly #hash: ResumableStreamHasher;
  readonly #startState: Uint8Array;
  #fh: FileHandle | null = null;
  /** Bytes handed to the disk and written. */
  #written: number;
  /** Bytes accepted (written or queued). */
  #accepted: number;
  #queue: Buffer[] = [];
  #queued = 0;
  #writing = false;
  #syncing: Promise<void> | null = null;
  #syncedTo: number;
  #error: unknown = null;
  #drain: (() => void) | null = null;
  /** write() returned false: the drain listener is owed a call. */
  #owed = false;
  /** complete() has begun: no periodic sync starts any more. */
  #closing = false;
  #idle: (() => void)[] = [];
  #stop!: () => void;
  #stopped = false;
  /** Settles when stop() is called: the body is left unread from then on. */
  readonly stopped: Promise<void>;
  #settle!: () => void;
  /** Settles when this run has made its bytes durable and let go of the upload. */
  readonly settled: Promise<void>;

  /** `hash` goes on from `startState`, the saved state after the `start` bytes. */
  constructor(path: string, start: number, size: number, hash: ResumableStreamHasher, startState: Uint8Array, durable: (end: number, hashState: Uint8Array) => Promise<void>) {
    this.#hash = hash;
    this.#startState = startState;
    this.#path = path;
    this.#start = start;
    this.#size = size;
    this.#durable = durable;
    this.#written = start;
    this.#accepted = start;
    this.#syncedTo = start;
    this.stopped = new Promise<void>((resolve) => (this.#stop = resolve));
    this.settled = new Promise<void>((resolve) => (this.#settle = resolve));
  }

  get wasStopped(): boolean {
    return this.#stopped;
  }

  async start(): Promise<void> {
    try {
      this.#fh = await open(this.#path, 'r+');
      // Whatever lies past the start was not promised (or is being sent again): written over from here.
      await this.#fh.truncate(this.#start);
    } catch (e) {
      throw mapIoError(e);
    }
  }

  stop(): void {
    this.#stopped = true;
    this.#stop();
  }

  resolveSettled(): void {
    this.#settle();
  }

  write(chunk: Uint8Array): boolean {
    if (this.#stopped) throw lfsError('LFS_ERR_NOT_READY', 'Another request took over this upload', { 'Retry-After': '1' });
    if (this.#error !== null) throw this.#error;
    if (this.#accepted + chunk.byteLength > this.#size) {
      throw lfsError('LFS_ERR_BODY_TOO_LARGE', `This PATCH goes past the upload's length of ${this.#size} bytes`);
    }
    if (chunk.byteLength === 0) return true;
    this.#queue.push(Buffer.from(chunk)); // uWS reuses the chunk's memory once its callback returns
    this.#queued += chunk.byteLength;
    this.#accepted += chunk.byteLength;
    this.#pump();
    if (this.#roomy()) return true;
    this.#owed = true;
    return false;
  }

  #roomy(): boolean {
    return this.#queued < MAX_QUEUED && this.#accepted - this.#syncedTo < MAX_UNSYNCED;
  }

  /** Calls the drain listener owed once there is room again (half the queue, and the sync caught up). */
  #maybeDrain(): void {
    if (this.#owed && this.#queued < MAX_QUEUED / 2 && this.#accepted - this.#syncedTo < MAX_UNSYNCED) {
      this.#owed = false;
      this.#drain?.();
    }
  }

  onDrain(listener: () => void): void {
    this.#drain = listener;
  }

  #pump(): void {
    if (this.#writing || this.#error !== null) return;
    const next = this.#queue.shift();
    if (next === undefined) {
      for (const w of this.#idle.splice(0)) w();
      return;
    }
    this.#writing = true;
    const at = this.#written;
    const step = (data: Buffer, position: number): void => {
      fsWrite(this.#fh!.fd, data, 0, data.byteLength, position, (err, n) => {
        if (err) {
          this.#error = mapIoError(err);
          this.#writing = false;
          this.#queue = [];
          for (const w of this.#idle.splice(0)) w();
          this.#drain?.();
          return;
        }
        if (n < data.byteLength) return step(data.subarray(n), position + n);
        this.#writing = false;
        this.#written = at + next.byteLength;
        // Hashed in the order written, so a snapshot taken with #written covers exactly those bytes.
        this.#hash.update(next, noop);
        this.#queued -= next.byteLength;
        this.#maybeDrain();
        this.#kickSync();
        this.#pump();
      });
    };
    step(next, at);
  }

  /** Starts a periodic sync when SYNC_EVERY bytes wait for one, or when the socket waits for one. */
  #kickSync(): void {
    if (this.#syncing !== null || this.#error !== null || this.#closing) return;
    const behind = this.#written - this.#syncedTo;
    if (behind >= SYNC_EVERY || (this.#owed && behind > 0 && !this.#writing && this.#queue.length === 0)) {
      this.#syncing = this.#sync().finally(() => {
        this.#syncing = null;
        this.#kickSync();
      });
    }
  }

  async #sync(): Promise<void> {
    const end = this.#written;
    const hashed = this.#hash.snapshot();
    hashed.catch(noop); // awaited below unless the sync fails first
    try {
      await this.#fh!.datasync();
      await this.#durable(end, await hashed);
      this.#syncedTo = end;
    } catch (e) {
      this.#error ??= mapIoError(e);
      this.#drain?.(); // the next write throws it
    }
    this.#maybeDrain();
  }

  /** Not a store's writer: the partial upload becomes an object through TransferService.upload. */
  finish(): Promise<PutResult> {
    return Promise.reject(new Error('a PATCH is completed with complete()'));
  }

  /** Waits for the queued bytes, makes them durable and closes the file; `discard`: keep nothing this run wrote. */
  async complete(discard = false): Promise<void> {
    if (this.#writing || this.#queue.length > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
    this.#closing = true;
    while (this.#syncing !== null) await this.#syncing;
    try {
      if (discard) {
        await this.#fh?.truncate(this.#start);
        await this.#durable(this.#start, this.#startState);
      } else if (this.#written > this.#syncedTo && this.#fh !== null) {
        // Also after a write error: what was written before it is kept.
        await this.#sync();
      }
    } finally {
      await this.#fh?.close().catch(() => undefined);
      this.#fh = null;
      this.#hash.drop();
    }
    if (this.#error !== null && !discard) throw this.#error;
  }

  async abort(): Promise<void> {
    this.stop();
  }
}

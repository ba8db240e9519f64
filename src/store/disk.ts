import { randomBytes } from 'node:crypto';
import { readdirSync, renameSync, statSync } from 'node:fs';
import { link, mkdir, open, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parseOid, shardPath, type Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { WorkerPool } from '../workers/pool.js';
import { DirSyncer } from './dir-sync.js';
import type { JournalFlushes } from '../metrics/registry.js';
import { Journal, type JournalLocation } from './journal.js';
import { smallBuffers } from './buffer-pool.js';
import { SMALL_OBJECT_MAX, SmallWriter } from './small-writer.js';
import { TRAILER_SIZE, INDEX_ENTRY_SIZE, decodeIndex, decodeTrailer, type FrameIndex } from './frame-format.js';
import { FramedChunkSource, fileReader } from './framed-reader.js';
import { FramedWriter } from './framed-writer.js';
import { RawChunkSource } from './raw-reader.js';
import { RawWriter } from './raw-writer.js';
import { StagingFile } from './staging-file.js';
import { walkLayout, type StrayReason } from './foreign-layout.js';
import { hashThread } from './hash-thread.js';
import { storageFault } from '../errors/storage-fault.js';
import type { BlobReader, BlobStore, ObjectWriter, PutResult, WriterOptions } from './types.js';

/**
 * The shared content-addressed store on a local disk: `objects/ab/cd/<oid>`, one copy per oid.
 * Uploads stream into `staging/` (same file system, so the final rename is atomic), are verified,
 * fsync'd, then renamed into place; directory fsyncs are group-committed.
 */
export class DiskBlobStore implements BlobStore {
  readonly #root: string;
  readonly #objects: string;
  readonly #staging: string;
  readonly #dirs = new DirSyncer();
  /** Which repositories have a legacy folder (issue 6), so batch stats nothing for the others. */
  readonly #legacyDirs = new Map<string, { present: boolean; at: number }>();
  /** Staging files this process is writing: never swept. */
  readonly #inFlight = new Set<string>();

  readonly #pool: WorkerPool;
  /** zstd level for new objects, or null to store them as they arrive. */
  readonly #level: number | null;
  readonly #directIo: boolean;
  #journal: Journal | null = null;
  /** Small objects whose bytes are still only in the journal. */
  readonly #journaled = new Map<Oid, JournalLocation>();
  /** Client uploads between createWriter and their finish or abort. */
  #uploads = 0;
  /** Oids with bytes in each journal segment, to write their files before the segment goes. */
  readonly #segmentOids = new Map<number, Set<Oid>>();
  /** Replayed references the index could not take at start (a full disk): no segment retires until they are in. */
  #unrestored: { repo: string; oid: Oid; size: number }[] = [];
  #restore: ((repo: string, oid: Oid, size: number) => void) | null = null;

  private constructor(root: string, pool: WorkerPool, level: number | null, directIo: boolean) {
    this.#root = root;
    this.#objects = join(root, 'objects');
    this.#staging = join(root, 'staging');
    this.#pool = pool;
    this.#level = level;
    this.#directIo = directIo;
  }

  static async open(root: string, options: { pool: WorkerPool; compressionLevel: number | null; directIo?: boolean }): Promise<DiskBlobStore> {
    const store = new DiskBlobStore(root, options.pool, options.compressionLevel, options.directIo ?? true);
    await mkdir(store.#objects, { recursive: true });
    await mkdir(store.#staging, { recursive: true });
    store.#journal = await Journal.open(join(root, 'journal'));
    return store;
  }

  /** Final path of an oid; the Oid brand guarantees 64 hex digits, so no traversal is possible. */
  pathOf(oid: Oid): string {
    return join(this.#objects, shardPath(oid));
  }

  async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    this.#uploads++;
    let counted = true;
    const done = (): void => {
      if (counted) this.#uploads--;
      counted = false;
    };
    try {
      const w = await this.#createWriter(oid, options);
      return { write: (c) => w.write(c), onDrain: (l) => w.onDrain(l), finish: () => w.finish().finally(done), abort: () => w.abort().finally(done) };
    } catch (e) {
      done();
      throw e;
    }
  }

  /** Whether the upload asking is the only one in flight, so its journal flush may run in line (see Journal). */
  readonly #alone = (): boolean => this.#uploads === 1;

  async #createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const size = options.expectedSize;
    if (size !== null && size <= SMALL_OBJECT_MAX) {
      // Small and of known size: acknowledged once journaled (one group-committed append).
      return new SmallWriter(oid, size, (data) => this.#journalSmall(options.repo, oid, data));
    }
    const inner = await this.#fileWriter(oid, size);
    return {
      write: (c) => inner.write(c),
      onDrain: (l) => inner.onDrain(l),
      finish: async () => {
        const r = await inner.finish();
        // The file is durable; the reference must be too before the client hears "stored".
        await this.#journal!.append({ repo: options.repo, oid, size: r.size, data: null }, { alone: this.#alone });
        return r;
      },
      abort: () => inner.abort(),
    };
  }

  /** A writer that streams into a staging file and renames it to the object's own file. */
  async #fileWriter(oid: Oid, expectedSize: number | null): Promise<ObjectWriter> {
    // Tiny objects are not worth a frame index; everything else is framed when compression is on.
    const framed = this.#level !== null && (expectedSize === null || expectedSize >= MIN_FRAMED_SIZE);
    // Large uploads bypass the page cache where their writes are aligned (see StagingFile: raw
    // objects and raw frames) and are hashed on the hash thread (see HashThread); small ones stay
    // cached for the downloads that often follow them, and are hashed in line.
    const large = expectedSize === null || expectedSize >= LARGE_UPLOAD_MIN_SIZE;
    const file = await StagingFile.create(this.#staging, oid, { direct: large && this.#directIo });
    const hash = large ? hashThread.open() : null;
    this.#inFlight.add(file.path);
    const commit = (f: StagingFile, r: Omit<PutResult, 'created'>): Promise<PutResult> => this.#commit(oid, f, r);
    const writer = framed
      ? new FramedWriter(oid, expectedSize, file, commit, this.#pool, this.#level!, hash)
      : new RawWriter(oid, expectedSize, file, commit, hash);
    // Forget the staging path whatever the outcome.
    const forget = (): void => void this.#inFlight.delete(file.path);
    return {
      write: (c) => writer.write(c),
      onDrain: (l) => writer.onDrain(l),
      finish: () => writer.finish().finally(forget),
      abort: () => writer.abort().finally(forget),
    };
  }

  /** Journals a verified small object; its own file is written later in the background. */
  async #journalSmall(repo: string, oid: Oid, data: Buffer): Promise<PutResult> {
    // No existence check of the file here (a threadpool round trip on the hot path): if the file
    // exists already, the background writer skips it when it retires the segment.
    if (this.#journaled.has(oid)) {
      await this.#journal!.append({ repo, oid, size: data.length, data: null }, { alone: this.#alone });
      return { size: data.length, storedSize: data.length, created: false };
    }
    const location = (await this.#journal!.append({ repo, oid, size: data.length, data }, { alone: this.#alone }))!;
    this.#remember(oid, location);
    return { size: data.length, storedSize: data.length, created: true };
  }

  #remember(oid: Oid, location: JournalLocation): void {
    this.#journaled.set(oid, location);
    let set = this.#segmentOids.get(location.segment);
    if (set === undefined) this.#segmentOids.set(location.segment, (set = new Set()));
    set.add(oid);
  }

  /**
   * Start-up replay: every record of the journal is handed to `apply` (which restores the index's
   * references), provided the object's bytes exist (its file, or its data in the journal): a
   * reference is never restored to bytes that are gone. On a full disk the index may refuse a
   * reference it lost: replay then defers it (the server starts and serves what the index holds),
   * and retireJournal restores it before any segment may go.
   */
  async recover(apply: (repo: string, oid: Oid, size: number) => void): Promise<{ replayed: number; deferred: number }> {
    this.#restore = apply;
    let n = 0;
    for (const segment of [...this.#journal!.sealed]) {
      for await (const r of this.#journal!.records(segment)) {
        if (r.location !== null && !(await exists(this.pathOf(r.oid)))) this.#remember(r.oid, r.location);
        if (this.#journaled.has(r.oid) || (await exists(this.pathOf(r.oid)))) {
          n++;
          try {
            apply(r.repo, r.oid, r.size);
          } catch (e) {
            if (storageFault(e) === null) throw e;
            this.#unrestored.push({ repo: r.repo, oid: r.oid, size: r.size });
          }
        }
      }
    }
    return { replayed: n, deferred: this.#unrestored.length };
  }

  /** References replay could not restore yet (see recover). */
  get deferredReferences(): number {
    return this.#unrestored.length;
  }

  /** Restores the references replay deferred; throws (a storage fault) while the index still refuses one. */
  #restoreDeferred(): void {
    while (this.#unrestored.length > 0) {
      const r = this.#unrestored[0]!;
      this.#restore!(r.repo, r.oid, r.size);
      this.#unrestored.shift();
    }
  }

  /**
   * Background step: closes an idle journal segment, writes the files of the small objects in the
   * sealed segments that are still wanted, then — once `checkpoint` has made the index durable on
   * its own — deletes those segments. Safe to interrupt: a segment goes only after all of that.
   *
   * It waits for a lull: each file costs a create, a write, an fsync, a rename and a directory fsync,
   * which in the middle of a burst of small uploads competes with their group commits for the disk
   * and the threadpool (measured: ~0.08 ms of HTTP-thread CPU per object, and the fsyncs on top).
   * A burst that starts while it runs stops it between two objects (whole segments retire; the
   * rest waits for the next lull). A burst long enough to seal RETIRE_BACKLOG segments is retired
   * while it runs, so the journal stays bounded.
   */
  async retireJournal(isWanted: (oid: Oid) => boolean, checkpoint: () => void): Promise<number> {
    // A segment holding a reference the index lacks must stay: its record is that reference's only copy.
    this.#restoreDeferred();
    const journal = this.#journal!;
    await journal.rotateIfIdle(RETIRE_IDLE_MS);
    // A burst that starts meanwhile stops the work; what is left waits for the next lull.
    const mayGoOn = (): boolean => journal.idleFor(RETIRE_IDLE_MS) || journal.sealed.length >= RETIRE_BACKLOG;
    const segments: number[] = [];
    for (const segment of [...journal.sealed]) {
      if (!(await this.#materializeSegment(segment, isWanted, mayGoOn))) break;
      segments.push(segment);
    }
    if (segments.length === 0) return 0;
    checkpoint();
    for (const segment of segments) {
      for (const oid of this.#segmentOids.get(segment) ?? []) {
        if (this.#journaled.get(oid)?.segment === segment) this.#journaled.delete(oid);
      }
      this.#segmentOids.delete(segment);
      await journal.remove(segment);
    }
    return segments.length;
  }

  /**
   * Writes the files of a segment's wanted objects, RETIRE_LANES at a time (each file waits mostly
   * on its fsync and its directories', which concurrent lanes share: see DirSyncer); false if
   * `mayGoOn` stopped it before the end.
   */
  async #materializeSegment(segment: number, isWanted: (oid: Oid) => boolean, mayGoOn: () => boolean): Promise<boolean> {
    if (!mayGoOn()) return false;
    const oids = [...(this.#segmentOids.get(segment) ?? [])];
    let next = 0;
    let stopped = false;
    const lane = async (): Promise<void> => {
      while (next < oids.length && !stopped) {
        const oid = oids[next++]!;
        const at = this.#journaled.get(oid);
        if (at === undefined || at.segment !== segment) continue;
        if (!mayGoOn()) {
          stopped = true;
          return;
        }
        try {
          if (isWanted(oid) && !(await exists(this.pathOf(oid)))) await this.#materialize(oid, at);
        } catch (e) {
          stopped = true; // the other lanes stop too; the segment waits for the next try
          throw e;
        }
      }
    };
    // Every lane settles before this returns, even when one fails: no write outlives the call.
    const lanes = await Promise.allSettled(Array.from({ length: RETIRE_LANES }, lane));
    const failed = lanes.find((l): l is PromiseRejectedResult => l.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    return !stopped;
  }

  /** Writes a journaled object to its own file, through the same verifying writers as an upload. */
  async #materialize(oid: Oid, at: JournalLocation): Promise<void> {
    const data = smallBuffers.take(at.length);
    try {
      const fh = await open(this.#journal!.pathOf(at.segment), 'r');
      try {
        await fh.read(data, 0, at.length, at.offset);
      } finally {
        await fh.close();
      }
      const w = await this.#fileWriter(oid, at.length);
      try {
        w.write(data); // the writers copy what they are given before returning
        await w.finish();
      } catch (e) {
        await w.abort();
        throw e;
      }
    } finally {
      smallBuffers.give(data);
    }
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
    const file = await this.#openPath(this.pathOf(oid));
    if (file !== null) return file;
    const at = this.#journaled.get(oid);
    if (at === undefined) return null;
    // Its own descriptor: the segment may be retired (unlinked) while this download runs.
    let fh: FileHandle;
    try {
      fh = await open(this.#journal!.pathOf(at.segment), 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return this.#openPath(this.pathOf(oid)); // just retired
      throw e;
    }
    return {
      size: at.length,
      storedSize: at.length,
      framed: false,
      read: (start, end) => new RawChunkSource(fh.fd, at.offset + start, at.offset + end),
      close: () => fh.close(),
    };
  }

  /** Drops a journaled object's bytes from view (quarantine, deletion); its segment retires as usual. */
  forgetJournaled(oid: Oid): void {
    this.#journaled.delete(oid);
  }

  get journalStats(): JournalFlushes {
    return this.#journal!.flushStats;
  }

  async closeJournal(): Promise<void> {
    await this.#journal?.close();
  }

  async #openPath(path: string): Promise<BlobReader | null> {
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
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
          read: (start, end) => new FramedChunkSource(fileReader(fh.fd), index, this.#pool, start, end),
          close: () => fh.close(),
        };
      }
      return { size, storedSize: size, framed: false, read: (start, end) => new RawChunkSource(fh.fd, start, end), close: () => fh.close() };
    } catch (e) {
      await fh.close();
      throw e;
    }
  }

  // --- maintenance (issue 6): legacy layout, quarantine, and crash-safe replace/link/remove.

  /**
   * The legacy per-repository file of an oid: `repos/{org}/{repo}/ab/cd/<oid>` (design §3). RepoName
   * segments are validated (no separators, no dot segments) and the Oid brand is 64 hex digits.
   */
  legacyPathOf(repo: RepoName, oid: Oid): string {
    return join(this.legacyDirOf(repo), shardPath(oid));
  }

  /** Root of a repository's legacy files. */
  legacyDirOf(repo: RepoName): string {
    return join(this.#root, 'repos', repo.org, repo.repo);
  }

  /** Opens a legacy file as a plain object (served until dedupe folds it); null when absent. */
  async openLegacy(repo: RepoName, oid: Oid): Promise<BlobReader | null> {
    let fh: FileHandle;
    try {
      fh = await open(this.legacyPathOf(repo, oid), 'r');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    // Legacy files come from other servers and are never in our framed form: served as they are.
    const { size } = await fh.stat().catch(async (e: unknown) => {
      await fh.close();
      throw e;
    });
    return { size, storedSize: size, framed: false, read: (start, end) => new RawChunkSource(fh.fd, start, end), close: () => fh.close() };
  }

  /**
   * Size of a repository's legacy file, or null. Synchronous for the batch answer: one stat, and
   * none at all for a repository without a legacy folder (remembered for a few seconds).
   */
  legacySizeSync(repo: RepoName, oid: Oid): number | null {
    const now = Date.now();
    const known = this.#legacyDirs.get(repo.key);
    let present = known !== undefined && now - known.at < LEGACY_DIR_TTL_MS ? known.present : null;
    if (present === null) {
      try {
        present = statSync(this.legacyDirOf(repo)).isDirectory();
      } catch {
        present = false;
      }
      if (this.#legacyDirs.size > 10_000) this.#legacyDirs.clear();
      this.#legacyDirs.set(repo.key, { present, at: now });
    }
    if (!present) return null;
    try {
      const st = statSync(this.legacyPathOf(repo, oid));
      return st.isFile() ? st.size : null;
    } catch {
      return null;
    }
  }

  /** Every legacy file of a repository whose name is an oid in its right shard folders. */
  async listLegacy(repo: RepoName): Promise<LegacyScan['objects']> {
    return (await this.scanLegacy(repo, 0)).objects;
  }

  /**
   * The legacy folder's objects (as listLegacy), and what else is there: files that are not named
   * `ab/cd/<oid>` (another server's layout copied in as is, litter), counted by reason and listed up
   * to `listed`, so a job can report them instead of passing over them.
   */
  async scanLegacy(repo: RepoName, listed: number): Promise<LegacyScan> {
    const objects: LegacyScan['objects'][number][] = [];
    const strays: { rel: string; reason: StrayReason }[] = [];
    const strayCounts: Partial<Record<StrayReason, number>> = {};
    for await (const e of walkLayout(this.legacyDirOf(repo), 'full')) {
      if (e.kind === 'object') {
        objects.push({ oid: e.oid, path: e.path, size: e.size, mtimeMs: e.mtimeMs });
        continue;
      }
      strayCounts[e.reason] = (strayCounts[e.reason] ?? 0) + 1;
      if (e.reason !== 'set_aside' && strays.length < listed) strays.push({ rel: e.rel, reason: e.reason });
    }
    return { objects, strays, strayCounts };
  }

  /** Renames a legacy file aside (`<oid>.<suffix>`) so it is neither served nor folded, but kept for inspection. */
  async setAsideLegacy(repo: RepoName, oid: Oid, suffix: 'refused' | 'corrupt'): Promise<void> {
    const path = this.legacyPathOf(repo, oid);
    await rename(path, `${path}.${suffix}`).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    });
    await this.#dirs.sync(dirname(path));
  }

  /** Bytes an object's file takes, or null when there is none. */
  async objectFileSize(oid: Oid): Promise<number | null> {
    return stat(this.pathOf(oid)).then((s) => s.size, () => null);
  }

  /** A staging folder of the maintenance jobs, apart from uploads' (same file system, so renames are atomic). */
  async maintenanceStaging(): Promise<string> {
    const dir = join(this.#staging, '.maintenance'); // hidden: not an upload's staging file
    await mkdir(dir, { recursive: true });
    return dir;
  }

  /** True while this process is writing a staging file for `oid` (an upload in flight). */
  isStaging(oid: Oid): boolean {
    for (const p of this.#inFlight) if (p.startsWith(join(this.#staging, oid))) return true;
    return false;
  }

  /**
   * Moves a quarantined object's file out of `objects/` (kept under `quarantine/` for inspection), so
   * the next upload of the oid stores good bytes instead of finding the bad file "already stored".
   * Idempotent: a file already gone is fine.
   */
  async quarantineFile(oid: Oid): Promise<boolean> {
    this.forgetJournaled(oid);
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

  /** Atomically replaces an object's file with a verified, fsync'd file from maintenanceStaging(). */
  async replaceObject(oid: Oid, staged: string): Promise<void> {
    const final = this.pathOf(oid);
    await rename(staged, final);
    await this.#dirs.sync(dirname(final));
  }

  /**
   * Links a verified file (a legacy one) into the shared store under its oid without copying and
   * makes the new name durable. False when the store already holds a file for the oid.
   */
  async linkObject(oid: Oid, from: string): Promise<boolean> {
    const final = this.pathOf(oid);
    const created = await mkdir(dirname(final), { recursive: true });
    try {
      await link(from, final);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    }
    const syncs = [this.#dirs.sync(dirname(final))];
    if (created !== undefined) syncs.push(this.#dirs.sync(dirname(dirname(final))), this.#dirs.sync(this.#objects));
    await Promise.all(syncs);
    return true;
  }

  /**
   * Takes an object's file out of `objects/` synchronously (a rename into `trash/`), so that no
   * upload can interleave between the caller's index change and the removal. Returns the trash
   * path to purge(), or null when there was no file.
   */
  detachObjectSync(oid: Oid): string | null {
    const to = join(this.#root, 'trash', `${oid}.${Date.now()}.${randomBytes(4).toString('hex')}`);
    try {
      renameSync(this.pathOf(oid), to);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    return to;
  }

  /** Creates `trash/` (call before detachObjectSync) and removes what earlier runs left in it. */
  async emptyTrash(): Promise<void> {
    const dir = join(this.#root, 'trash');
    await mkdir(dir, { recursive: true });
    for (const name of await readdir(dir)) await unlink(join(dir, name)).catch(() => undefined);
  }

  /** Removes a detached file (or any file the maintenance jobs own) and makes the removal durable. */
  async purge(path: string): Promise<void> {
    await unlink(path).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
    });
    await this.#dirs.sync(dirname(path));
  }
  // --- end maintenance

  /**
   * Object files no reference points to: an upload killed between its rename into `objects/` and its
   * journal record (never acknowledged, so its client sends it again), or a dedupe killed between
   * its link and its index row (the legacy file is still there). `isKnown` asks the index, after
   * journal replay; an oid whose bytes are journaled is known too. Only meaningful while no upload
   * or job runs: at start, with the data directory locked (an upload in flight may have renamed its
   * file and not yet recorded it).
   */
  findOrphans(isKnown: (oid: Oid) => boolean): { path: string; size: number }[] {
    // Synchronous: it runs before the server listens, when nothing else waits on the event loop, and
    // a threadpool round trip per directory would make the walk of a large store several times slower.
    const out: { path: string; size: number }[] = [];
    const names = (dir: string): string[] => {
      try {
        return readdirSync(dir);
      } catch {
        return [];
      }
    };
    for (const a of names(this.#objects)) {
      if (!/^[0-9a-f]{2}$/.test(a)) continue;
      for (const b of names(join(this.#objects, a))) {
        if (!/^[0-9a-f]{2}$/.test(b)) continue;
        for (const name of names(join(this.#objects, a, b))) {
          const oid = parseOid(name);
          if (oid === null || !oid.startsWith(a + b) || isKnown(oid) || this.#journaled.has(oid)) continue;
          const st = statSync(this.pathOf(oid), { throwIfNoEntry: false });
          if (st !== undefined && st.isFile()) out.push({ path: this.pathOf(oid), size: st.size });
        }
      }
    }
    return out;
  }

  /**
   * Start-up: removes every staging file. With the data directory locked (one process per data
   * directory) each one belongs to a process that died mid-upload, whatever its age.
   */
  async clearStaging(): Promise<number> {
    let removed = 0;
    for (const e of await readdir(this.#staging, { withFileTypes: true })) {
      if (!e.isFile()) continue; // .maintenance/ is the jobs' own, emptied when they start
      await unlink(join(this.#staging, e.name)).then(() => removed++, () => undefined);
    }
    if (removed > 0) await this.#dirs.sync(this.#staging);
    return removed;
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

  /**
   * Does what an upload does, in small: a file created in `staging/`, written, fsync'd, renamed into
   * `objects/` (where an upload's rename makes its shard folder), then removed. Probing `staging/`
   * alone said "ready" while `objects/` refused every upload. The probe's name is no oid, so neither
   * findOrphans nor a download ever takes it for an object.
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

/** What DiskBlobStore.scanLegacy finds in a repository's legacy folder. */
export interface LegacyScan {
  readonly objects: readonly { readonly oid: Oid; readonly path: string; readonly size: number; readonly mtimeMs: number }[];
  /** Files that are not objects of the layout, up to the number asked for (set-aside files never listed). */
  readonly strays: readonly { readonly rel: string; readonly reason: StrayReason }[];
  readonly strayCounts: Partial<Record<StrayReason, number>>;
}

/** How long the presence of a repository's legacy folder is remembered. */
const LEGACY_DIR_TTL_MS = 5000;

/** Objects smaller than this are always stored as they arrive. */
const MIN_FRAMED_SIZE = 4096;
/** A journal with nothing appended for this long is retired (see retireJournal). */
const RETIRE_IDLE_MS = 1000;
/** Sealed journal segments (16 MiB each) that are retired even while uploads go on. */
const RETIRE_BACKLOG = 16;
/** Objects written to their own files at once while retiring (libuv's pool has 4 threads). */
const RETIRE_LANES = 4;
/** Uploads from this size (or of unknown size) go past the page cache and through the hash thread. */
const LARGE_UPLOAD_MIN_SIZE = 8 << 20;

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

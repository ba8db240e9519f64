import { NO_SWEEPS, QuarantinedCopy, SettingsChanged, SweepMissed, type ObjectIndex } from '../db/index-types.js';
import { lfsError } from '../errors/errors.js';
import type { Metrics } from '../metrics/registry.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import { reserveReached, type DiskReserve } from '../store/disk-reserve.js';
import type { BlobReader, BlobStore, InLineObject, JournaledPut, LegacyLayout, ObjectWriter, PutResult } from '../store/types.js';
import type { UploadJudge } from './access-service.js';
import type { ClusterUploads, ClusterWrite } from './cluster-uploads.js';
import type { DownloadGrants } from './download-grants.js';
import type { UploadGate, UploadInProgress } from './maintenance/maintenance-deps.js';
import { log as defaultLog } from '../util/log.js';

/** The body of an upload, fed into a writer as it arrives (the HTTP layer's BodyPump). */
export interface UploadBody {
  into(writer: ObjectWriter): Promise<void>;
  /** The body's sha256 when this process already hashed it (resumable upload): not hashed again. */
  readonly sha256?: string;
}

/** Moves a presigned upload into the shared store once its bytes are confirmed (PresignService). */
export interface IncomingPromoter {
  promote(repo: RepoName, oid: Oid, size: number): Promise<PutResult>;
}

/** What transfers use besides the store and the index; each absent part is simply not used. */
export interface TransferParts {
  readonly cluster?: ClusterUploads | null;
  readonly reserve?: DiskReserve | null;
  readonly grants?: DownloadGrants | null;
  readonly promoter?: IncomingPromoter | null;
  readonly log?: (msg: string, fields: object) => void;
}

/** Saved settings changing under an upload this many times in a row answer 503: the client sends it again. */
const SETTINGS_TRIES = 3;

/**
 * Uploads, downloads and verification of single objects. The store verifies bytes; this layer
 * records references and enforces that a repository only ever reaches objects it holds itself.
 */
export class TransferService implements UploadGate {
  readonly #store: BlobStore;
  readonly #objects: ObjectIndex;
  readonly #metrics: Metrics;
  readonly #legacy: LegacyLayout | null;
  /** Oids with an upload between its first byte and its recorded reference (retain never takes them). */
  readonly #uploading = new Map<string, number>();
  /** The deletion gate: oids retain is deleting, each with the promise that settles with the delete. */
  readonly #deleting = new Map<string, Promise<void>>();
  readonly #cluster: ClusterUploads | null;
  /** New object bytes stop short of the disk's free-space reserve; null with a bucket store. */
  readonly #reserve: DiskReserve | null;
  /** Downloads granted by batch answers skip their own index lookup. */
  readonly #grants: DownloadGrants | null;
  readonly #promoter: IncomingPromoter | null;
  readonly countUploadBytes: (bytes: number) => void;
  readonly countDownloadBytes: (bytes: number) => void;
  readonly #log: (msg: string, fields: object) => void;
  /** Uploads may be acknowledged before their reference commits (see #acknowledgesFirst): off after such a commit failed, until one succeeds. */
  #indexTakes = true;

  constructor(store: BlobStore, objects: ObjectIndex, metrics: Metrics, parts: TransferParts = {}) {
    this.#log = parts.log ?? defaultLog;
    this.#store = store;
    this.#objects = objects;
    this.#metrics = metrics;
    this.#cluster = parts.cluster ?? null;
    this.#reserve = parts.reserve ?? null;
    this.#grants = parts.grants ?? null;
    this.#promoter = parts.promoter ?? null;
    this.#legacy = store.legacy;
    // Bound at the first chunk, not here: the metrics are built at their first use (Metrics).
    type Bound = ReturnType<Metrics['transferBytes']['labels']>;
    let up: Bound | null = null;
    let down: Bound | null = null;
    this.countUploadBytes = (bytes) => (up ??= metrics.transferBytes.labels({ direction: 'upload' })).inc(bytes);
    this.countDownloadBytes = (bytes) => (down ??= metrics.transferBytes.labels({ direction: 'download' })).inc(bytes);
  }

  /** 507 when `size` new bytes would eat the reserve, kept for what frees space and for the index. */
  admitBytes(size: number | null): void {
    if (this.#reserve !== null && !this.#reserve.admits(size ?? 0)) throw reserveReached();
  }

  isUploading(oid: Oid): boolean {
    return this.#uploading.has(oid);
  }

  /**
   * Retain marks an oid (in the same synchronous step as its isUploading check) and calls the result
   * once the delete settled: uploads of the oid wait, so none finds the doomed bytes "already stored".
   */
  markDeleting(oid: Oid): () => void {
    this.#grants?.withdraw(oid);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    this.#deleting.set(oid, gate);
    return () => {
      if (this.#deleting.get(oid) === gate) this.#deleting.delete(oid);
      open();
    };
  }

  /** In flight from this call on (retain skips the oid); begun once a deletion under way settled. */
  async asUpload<T>(oid: Oid, write: (upload: UploadInProgress) => Promise<T>): Promise<T> {
    this.#uploading.set(oid, (this.#uploading.get(oid) ?? 0) + 1);
    try {
      for (let gate = this.#deleting.get(oid); gate !== undefined; gate = this.#deleting.get(oid)) await gate;
      if (this.#cluster === null) return await write(this.#localUpload(oid));
      return await this.#cluster.run(oid, (w) => write(this.#clusterUpload(oid, w)));
    } finally {
      const n = this.#uploading.get(oid)! - 1;
      if (n === 0) this.#uploading.delete(oid);
      else this.#uploading.set(oid, n);
    }
  }

  /** One node: the index answers in-process, and no other node deletes. */
  #localUpload(oid: Oid): UploadInProgress {
    return {
      quarantined: () => this.#objects.isQuarantined(oid),
      reference: (repo, size, storedSize, storedVerified, setting = null) =>
        this.#reference(oid, () => this.#objects.addReference(repo, oid, size, storedSize, { storedVerified, ticket: null, ackedSweep: NO_SWEEPS, setting })),
    };
  }

  /** A node of a cluster: the quarantine is learnt on the way or checked by the reference's statement (ClusterUploads). */
  #clusterUpload(oid: Oid, w: ClusterWrite): UploadInProgress {
    return {
      quarantined: async () => w.quarantined ?? false,
      reference: (repo, size, storedSize, storedVerified, setting = null) =>
        this.#reference(oid, () => w.reference(storedVerified, setting, (commit) => this.#objects.addReference(repo, oid, size, storedSize, commit))),
    };
  }

  /** Records a reference; what the index refused for a reason a retry resolves is a 503 the client retries. */
  async #reference(oid: Oid, record: () => Promise<void>): Promise<void> {
    try {
      await record();
    } catch (e) {
      if (e instanceof QuarantinedCopy) {
        // The store kept its copy, the one an audit found bad: set it aside so the retry stores these bytes.
        await this.#store.quarantine(oid);
        throw lfsError('LFS_ERR_NOT_READY', 'The stored copy of this object failed an audit and was set aside; send the object again', { 'Retry-After': '1' });
      }
      if (e instanceof SweepMissed) {
        throw lfsError('LFS_ERR_NOT_READY', 'This node was out of touch with the cluster while a retain job ran; send the object again', { 'Retry-After': '5' });
      }
      throw e;
    }
  }

  /**
   * A second upload of bytes the store holds proves possession and adds only the reference.
   * `acknowledge` is called once stored, before the commit when that is safe (#acknowledgesFirst).
   */
  async upload(repo: RepoName, oid: Oid, body: UploadBody, expectedSize: number | null, judge: UploadJudge | null = null, acknowledge: () => void = () => undefined): Promise<number> {
    const started = performance.now();
    this.admitBytes(expectedSize);
    this.#metrics.inFlight.inc({ direction: 'upload' });
    try {
      return await this.asUpload(oid, (upload) => this.#upload(repo, oid, body, expectedSize, started, upload, judge, acknowledge));
    } finally {
      this.#metrics.inFlight.dec({ direction: 'upload' });
    }
  }

  async #upload(
    repo: RepoName,
    oid: Oid,
    body: UploadBody,
    expectedSize: number | null,
    started: number,
    upload: UploadInProgress,
    judge: UploadJudge | null,
    acknowledge: () => void,
  ): Promise<number> {
    // A quarantined oid's bad bytes must go first, or the store would keep them as "already stored"
    // (covers a crash between the audit's mark and its move).
    if (await upload.quarantined()) await this.#store.quarantine(oid);
    const journal = this.#store.journal;
    const options = { expectedSize, sha256: body.sha256 };
    const journaled = journal === null ? null : await journal.createWriter(repo.key, oid, options);
    const writer = journaled ?? (await this.#store.createWriter(oid, options));
    try {
      await body.into(writer);
      const put: JournaledPut = journaled === null ? { ...(await writer.finish()), keepReference: null } : await journaled.finish();
      const keep = put.keepReference;
      const first = keep !== null && this.#acknowledgesFirst(put, judge);
      if (first) {
        acknowledge();
        await this.#referenceAcknowledged(upload, repo, oid, put, keep);
      } else {
        await this.#referenceJudged(upload, repo, put, judge);
        this.#indexTakes = true;
      }
      // The streamed bytes were counted chunk by chunk (countUploadBytes); this is the completed size.
      this.#metrics.transferCompletedBytes.inc({ direction: 'upload' }, put.size);
      this.#metrics.transfers.inc({ direction: 'upload', outcome: 'ok' });
      this.#metrics.uploadSeconds.observe((performance.now() - started) / 1000);
      if (!first) acknowledge();
      return put.size;
    } catch (e) {
      await writer.abort();
      this.#metrics.transfers.inc({ direction: 'upload', outcome: 'failed' });
      throw e;
    }
  }

  /**
   * Whether the client may hear "stored" before the reference commits (the commit overlaps its next
   * round trip). All must hold: the journal holds the reference (keepReference, checked by the
   * caller); the index cannot refuse it (new bytes, no cluster, no settings judge); the index is
   * embedded (the commit runs before any other request is read); no commit failed since the last.
   */
  #acknowledgesFirst(put: PutResult, judge: UploadJudge | null): boolean {
    return this.#indexTakes && put.created && judge === null && this.#cluster === null;
  }

  /** Commits the reference of an upload already acknowledged; never throws (the answer is sent). */
  async #referenceAcknowledged(upload: UploadInProgress, repo: RepoName, oid: Oid, put: PutResult, keep: () => void): Promise<void> {
    try {
      await upload.reference(repo.key, put.size, put.storedSize, put.created, null);
    } catch (e) {
      this.#indexTakes = false;
      keep();
      this.#log('the index did not take the reference of an acknowledged upload: the journal keeps it until it does', { level: 'warn', repo: repo.key, oid, err: String(e) });
    }
  }

  /** Held to the shared settings it was admitted by: saved anew meanwhile, it is judged again. */
  async #referenceJudged(upload: UploadInProgress, repo: RepoName, put: PutResult, judge: UploadJudge | null): Promise<void> {
    let setting = judge?.setting ?? null;
    for (let attempt = 1; ; attempt++) {
      try {
        return await upload.reference(repo.key, put.size, put.storedSize, put.created, setting);
      } catch (e) {
        if (!(e instanceof SettingsChanged) || judge === null) throw e;
        if (attempt === SETTINGS_TRIES) throw lfsError('LFS_ERR_NOT_READY', 'The access settings are being changed; send the object again', { 'Retry-After': '1' });
        setting = await judge.rejudge(put.size);
      }
    }
  }

  /** Before an audit quarantines `oid`: no grant serves its bad bytes from now on. */
  withdrawGrants(oid: Oid): void {
    this.#grants?.withdraw(oid);
  }

  /** A just-granted small object's bytes read in line; undefined: openForDownload decides. */
  openInLine(repo: RepoName, oid: Oid): InLineObject | undefined {
    if (this.#grants === null || this.#store.openInLine === undefined || !this.#grants.has(repo.key, oid)) return undefined;
    const held = this.#store.openInLine(oid);
    if (held !== undefined) this.#grants.take(repo.key, oid);
    return held;
  }

  /** Opens an object this repository holds; 404 otherwise (never revealing other repositories' objects). */
  async openForDownload(repo: RepoName, oid: Oid): Promise<BlobReader> {
    if (this.#grants?.take(repo.key, oid) === true) {
      // The batch found it in this repository a moment ago; absent from the store, the index decides.
      const granted = await this.#store.open(oid);
      if (granted !== null) return granted;
    }
    const row = await this.#objects.findInRepo(repo.key, oid);
    if (row === null) {
      // Not folded into the shared store yet: the repository's legacy file is served as it is.
      const legacy = this.#legacy === null || (await this.#objects.isQuarantined(oid)) ? null : await this.#legacy.openLegacy(repo, oid);
      if (legacy === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
      return legacy;
    }
    const reader = await this.#store.open(oid);
    if (reader === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND', 'Object is recorded but its bytes are missing from the store');
    return reader;
  }

  /** 200 only when the repository holds the object with that size; promotes a presigned upload. */
  async verify(repo: RepoName, oid: Oid, size: number): Promise<void> {
    const row = (await this.#objects.findInRepo(repo.key, oid)) ?? (await this.#legacyRow(repo, oid));
    if (row === null && this.#promoter !== null) {
      const promoter = this.#promoter;
      // Promotion writes the oid into the shared keyspace: an upload, as far as retain is concerned.
      const put = await this.asUpload(oid, async (upload) => {
        const p = await promoter.promote(repo, oid, size);
        await upload.reference(repo.key, p.size, p.storedSize, p.created);
        return p;
      });
      // A presigned upload went straight to the bucket: no chunk passed here, so it is counted now.
      this.#metrics.transferBytes.inc({ direction: 'upload' }, put.size);
      this.#metrics.transferCompletedBytes.inc({ direction: 'upload' }, put.size);
      this.#metrics.transfers.inc({ direction: 'upload', outcome: 'ok' });
      return;
    }
    if (row === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
    if (row.size !== size) throw lfsError('LFS_ERR_SIZE_MISMATCH', `Stored object has ${row.size} bytes, not ${size}`);
  }

  async #legacyRow(repo: RepoName, oid: Oid): Promise<{ size: number } | null> {
    if (this.#legacy === null || (await this.#objects.isQuarantined(oid))) return null;
    const size = this.#legacy.legacySizeSync(repo, oid);
    return size === null ? null : { size };
  }

  /** A download finished: `bytes` is what a completed one sent (its chunks were counted as they streamed). */
  countDownloaded(bytes: number, ok: boolean): void {
    // Bound at first use (a series appears once it has counted something), then kept.
    (this.#downloadedBytes ??= this.#metrics.transferCompletedBytes.labels({ direction: 'download' })).inc(bytes);
    if (ok) (this.#downloadsOk ??= this.#metrics.transfers.labels({ direction: 'download', outcome: 'ok' })).inc();
    else this.#metrics.transfers.inc({ direction: 'download', outcome: 'failed' });
  }

  #downloadedBytes: ReturnType<Metrics['transferCompletedBytes']['labels']> | null = null;
  #downloadsOk: ReturnType<Metrics['transfers']['labels']> | null = null;
}

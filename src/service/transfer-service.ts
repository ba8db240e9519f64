import type { MaintenanceIndex, ObjectIndex } from '../db/index-types.js';
import { lfsError } from '../errors/errors.js';
import type { Metrics } from '../metrics/registry.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { BlobReader, BlobStore, LegacyLayout, ObjectWriter, PutResult } from '../store/types.js';
import type { ClusterNode } from './cluster-node.js';
import type { UploadGate } from './maintenance/maintenance-deps.js';

/** The body of an upload, fed into a writer as it arrives (the HTTP layer's BodyPump). */
export interface UploadBody {
  into(writer: ObjectWriter): Promise<void>;
}

/** Moves a presigned upload into the shared store once its bytes are confirmed (PresignService). */
export interface IncomingPromoter {
  promote(repo: RepoName, oid: Oid, size: number): Promise<PutResult>;
}

/** With a shared index: this node, and the index where uploads in flight are recorded for every node to see. */
export interface ClusterUploads {
  readonly node: ClusterNode;
  readonly ledger: MaintenanceIndex;
  readonly log: (msg: string, fields: object) => void;
}

/** How long an upload waits for another node's delete of its oid before answering 503. */
const DELETE_WAIT_MS = 30_000;
/** How often the index is asked whether that delete is done. */
const DELETE_POLL_MS = 100;

/**
 * Uploads, downloads and verification of single objects. The store verifies bytes; this layer
 * records references and enforces that a repository only ever reaches objects it holds itself.
 */
export class TransferService implements UploadGate {
  readonly #store: BlobStore;
  readonly #objects: ObjectIndex;
  readonly #metrics: Metrics;
  /** The legacy per-repository layout, served until dedupe folds it (disk only). */
  readonly #legacy: LegacyLayout | null;
  /** Oids with an upload between its first byte and its recorded reference (retain never takes them). */
  readonly #uploading = new Map<string, number>();
  /** The deletion gate: oids retain is deleting, each with the promise that settles with the delete. */
  readonly #deleting = new Map<string, Promise<void>>();
  /** Null on the one node of an embedded index. */
  readonly #cluster: ClusterUploads | null;
  /** Per-chunk byte counters for the HTTP layer (BodyPump, sendStream): bytes counted as they stream. */
  readonly countUploadBytes: (bytes: number) => void;
  readonly countDownloadBytes: (bytes: number) => void;

  constructor(
    store: BlobStore,
    objects: ObjectIndex,
    metrics: Metrics,
    cluster: ClusterUploads | null = null,
  ) {
    this.#store = store;
    this.#objects = objects;
    this.#metrics = metrics;
    this.#cluster = cluster;
    this.#legacy = store.legacy;
    // Bound at the first chunk, not here: the metrics are built at their first use (Metrics).
    type Bound = ReturnType<Metrics['transferBytes']['labels']>;
    let up: Bound | null = null;
    let down: Bound | null = null;
    this.countUploadBytes = (bytes) => (up ??= metrics.transferBytes.labels({ direction: 'upload' })).inc(bytes);
    this.countDownloadBytes = (bytes) => (down ??= metrics.transferBytes.labels({ direction: 'download' })).inc(bytes);
  }

  /** True while an upload of `oid` is in flight, up to and including recording its reference. */
  isUploading(oid: Oid): boolean {
    return this.#uploading.has(oid);
  }

  /**
   * Retain marks an oid before it drops the oid's last reference (same synchronous step as its
   * isUploading check), and calls the returned function once the store's delete settled: uploads of
   * the oid on this node wait until then, so none finds the doomed bytes "already stored", and each
   * stores fresh ones instead. Other nodes learn of the delete from its intent in the index.
   */
  markDeleting(oid: Oid): () => void {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    this.#deleting.set(oid, gate);
    return () => {
      if (this.#deleting.get(oid) === gate) this.#deleting.delete(oid);
      open();
    };
  }

  /**
   * Runs a write of `oid` (writer to recorded reference) as an upload: in flight from this call on
   * (retain skips the oid), and begun only once a deletion of the oid under way has settled.
   */
  async asUpload<T>(oid: Oid, write: (quarantined: boolean | null) => Promise<T>): Promise<T> {
    this.#uploading.set(oid, (this.#uploading.get(oid) ?? 0) + 1);
    try {
      for (let gate = this.#deleting.get(oid); gate !== undefined; gate = this.#deleting.get(oid)) await gate;
      if (this.#cluster === null) return await write(null);
      return await this.#asClusterUpload(this.#cluster, oid, write);
    } finally {
      const n = this.#uploading.get(oid)! - 1;
      if (n === 0) this.#uploading.delete(oid);
      else this.#uploading.set(oid, n);
    }
  }

  /**
   * With a shared index: the write is recorded in flight for every node's retain to see, and waits
   * while another node deletes the oid (its intent is in the index until the bytes are gone).
   */
  async #asClusterUpload<T>(
    cluster: ClusterUploads,
    oid: Oid,
    write: (quarantined: boolean | null) => Promise<T>,
  ): Promise<T> {
    const { ticket, deletePending, quarantined } = await cluster.ledger.beginUpload(oid, cluster.node.id, Date.now());
    try {
      if (deletePending) await this.#awaitDelete(cluster.ledger, oid);
      return await write(quarantined);
    } finally {
      // Not on the response's path: a row left a moment longer only keeps retain off this oid.
      void cluster.ledger.endUpload(ticket).catch((e: unknown) => cluster.log('upload in flight not cleared in the index', { level: 'warn', oid, err: String(e) }));
    }
  }

  /**
   * Another node is deleting the oid: its intent goes once the bytes are gone. Nothing announces
   * that across nodes, so the index is asked again, at most DELETE_WAIT_MS in all; past that the
   * client is asked to retry (503) rather than held.
   */
  async #awaitDelete(ledger: MaintenanceIndex, oid: Oid): Promise<void> {
    const until = Date.now() + DELETE_WAIT_MS;
    while (await ledger.deletePending(oid)) {
      if (Date.now() > until) throw lfsError('LFS_ERR_NOT_READY', 'This object is being deleted by a maintenance job on another node; retry shortly', { 'Retry-After': '5' });
      await new Promise((r) => setTimeout(r, DELETE_POLL_MS));
    }
  }

  /**
   * Streams an upload into the shared store and records this repository's reference. A second
   * upload of bytes the store already holds proves possession and adds only the reference.
   */
  async upload(repo: RepoName, oid: Oid, body: UploadBody, expectedSize: number | null): Promise<number> {
    const started = performance.now();
    this.#metrics.inFlight.inc({ direction: 'upload' });
    try {
      return await this.asUpload(oid, (quarantined) => this.#upload(repo, oid, body, expectedSize, started, quarantined));
    } finally {
      this.#metrics.inFlight.dec({ direction: 'upload' });
    }
  }

  async #upload(repo: RepoName, oid: Oid, body: UploadBody, expectedSize: number | null, started: number, quarantined: boolean | null): Promise<number> {
    // A quarantined oid's bad bytes must be gone before the new ones commit, or the store would keep
    // them as "already stored" (the audit moves them; this covers a crash between its mark and its
    // move). Every backend: a disk file, a bucket key, a journal entry.
    if (quarantined ?? (await this.#objects.isQuarantined(oid))) await this.#store.quarantine(oid);
    const writer = await this.#store.createWriter(oid, { repo: repo.key, expectedSize });
    try {
      await body.into(writer);
      const put = await writer.finish();
      await this.#objects.addReference(repo.key, oid, put.size, put.storedSize);
      // The streamed bytes were counted chunk by chunk (countUploadBytes); this is the completed size.
      this.#metrics.transferCompletedBytes.inc({ direction: 'upload' }, put.size);
      this.#metrics.transfers.inc({ direction: 'upload', outcome: 'ok' });
      this.#metrics.uploadSeconds.observe((performance.now() - started) / 1000);
      return put.size;
    } catch (e) {
      await writer.abort();
      this.#metrics.transfers.inc({ direction: 'upload', outcome: 'failed' });
      throw e;
    }
  }

  /** Opens an object this repository holds; 404 otherwise (never revealing other repositories' objects). */
  async openForDownload(repo: RepoName, oid: Oid): Promise<BlobReader> {
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

  /** SVC_S3_PRESIGN (issue 8): promotes presigned uploads at verify; null when links point here. */
  #promoter: IncomingPromoter | null = null;

  /** Turns on promotion of presigned uploads by the verify action. */
  usePromoter(promoter: IncomingPromoter): void {
    this.#promoter = promoter;
  }

  /**
   * The verify action: 200 only when this repository holds the object with exactly that size. With
   * presigned uploads, the object arrives in the bucket's landing area and this is where it is
   * promoted into the shared store, after its digest was confirmed, and its reference recorded.
   */
  async verify(repo: RepoName, oid: Oid, size: number): Promise<void> {
    const row = (await this.#objects.findInRepo(repo.key, oid)) ?? (await this.#legacyRow(repo, oid));
    if (row === null && this.#promoter !== null) {
      const promoter = this.#promoter;
      // Promotion writes the oid into the shared keyspace: an upload, as far as retain is concerned.
      const put = await this.asUpload(oid, async () => {
        const p = await promoter.promote(repo, oid, size);
        await this.#objects.addReference(repo.key, oid, p.size, p.storedSize);
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
    this.#metrics.transferCompletedBytes.inc({ direction: 'download' }, bytes);
    this.#metrics.transfers.inc({ direction: 'download', outcome: ok ? 'ok' : 'failed' });
  }
}

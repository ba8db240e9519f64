import type { ObjectsRepo } from '../db/objects-repo.js';
import { lfsError } from '../errors/errors.js';
import type { Metrics } from '../metrics/registry.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { BlobReader, BlobStore, ObjectWriter } from '../store/types.js';

/** The body of an upload, fed into a writer as it arrives (the HTTP layer's BodyPump). */
export interface UploadBody {
  into(writer: ObjectWriter): Promise<void>;
}

/**
 * Uploads, downloads and verification of single objects. The store verifies bytes; this layer
 * records references and enforces that a repository only ever reaches objects it holds itself.
 */
export class TransferService {
  readonly #store: BlobStore;
  readonly #objects: ObjectsRepo;
  readonly #metrics: Metrics;

  constructor(store: BlobStore, objects: ObjectsRepo, metrics: Metrics) {
    this.#store = store;
    this.#objects = objects;
    this.#metrics = metrics;
  }

  /**
   * Streams an upload into the shared store and records this repository's reference. A second
   * upload of bytes the store already holds proves possession and adds only the reference.
   */
  async upload(repo: RepoName, oid: Oid, body: UploadBody, expectedSize: number | null): Promise<number> {
    const started = performance.now();
    this.#metrics.inFlight.inc({ direction: 'upload' });
    const writer = await this.#store.createWriter(oid, { expectedSize });
    try {
      await body.into(writer);
      const put = await writer.finish();
      this.#objects.addReference(repo.key, oid, put.size, put.storedSize);
      this.#metrics.transferBytes.inc({ direction: 'upload' }, put.size);
      this.#metrics.transfers.inc({ direction: 'upload', outcome: 'ok' });
      this.#metrics.uploadSeconds.observe((performance.now() - started) / 1000);
      return put.size;
    } catch (e) {
      await writer.abort();
      this.#metrics.transfers.inc({ direction: 'upload', outcome: 'failed' });
      throw e;
    } finally {
      this.#metrics.inFlight.dec({ direction: 'upload' });
    }
  }

  /** Opens an object this repository holds; 404 otherwise (never revealing other repositories' objects). */
  async openForDownload(repo: RepoName, oid: Oid): Promise<BlobReader> {
    const row = this.#objects.findInRepo(repo.key, oid);
    if (row === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
    const reader = await this.#store.open(oid);
    if (reader === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND', 'Object is recorded but its bytes are missing from the store');
    return reader;
  }

  /** The verify action: 200 only when this repository holds the object with exactly that size. */
  verify(repo: RepoName, oid: Oid, size: number): void {
    const row = this.#objects.findInRepo(repo.key, oid);
    if (row === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND');
    if (row.size !== size) throw lfsError('LFS_ERR_SIZE_MISMATCH', `Stored object has ${row.size} bytes, not ${size}`);
  }

  countDownloaded(bytes: number, ok: boolean): void {
    this.#metrics.transferBytes.inc({ direction: 'download' }, bytes);
    this.#metrics.transfers.inc({ direction: 'download', outcome: ok ? 'ok' : 'failed' });
  }
}

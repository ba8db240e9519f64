import { isLfsError } from '../../errors/errors.js';
import { MIN_FRAMED_SIZE } from '../../format/frame-format.js';
import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import { compressingStore, ForwardingBlobStore, measuringStore } from '../../store/compose.js';
import type { BlobReader, BlobStore, ObjectWriter, PutResult, WriterOptions } from '../../store/types.js';
import { reportBytes } from '../../workers/byte-meter.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { pumpInto, withObjectPull } from './object-io.js';
import { forEachLimited } from './worker-tasks.js';

export interface CompressReport {
  [key: string]: unknown;
  readonly objects: number;
  readonly compressed: number;
  readonly already_compressed: number;
  /** Framing would not make them smaller (random data): left as they are. */
  readonly not_smaller: number;
  /** Too small to frame, or not (yet) in the backend itself (a small object still in the journal): left as they are. */
  readonly skipped: number;
  /** Did not hash to their oid or could not be read: left alone (run an audit). */
  readonly refused: number;
  readonly bytes_before: number;
  readonly bytes_after: number;
  readonly saved: number;
  readonly dry_run: boolean;
  readonly complete: boolean;
  readonly refused_objects: readonly string[];
}

/**
 * Compress: plain objects re-encoded framed with `replace: true`; the framed copy replaces the plain
 * one only once complete, verified and smaller. A dry run writes into a counting backend.
 */
export async function runCompress(deps: MaintenanceDeps, repo: RepoName, dryRun: boolean, ctx: JobContext): Promise<CompressReport> {
  const { store, backend, maint, objects, tasks } = deps;
  const rows = (await maint.repoObjects(repo.key)).filter((r) => !r.quarantined);
  const smaller = dryRun ? null : new SmallerOnly(backend);
  const writer = smaller === null ? measuringStore(backend.blockSize, tasks, deps.hasher, deps.compressionLevel) : compressingStore(smaller, tasks, deps.hasher, deps.compressionLevel);
  ctx.progress.objectsTotal = rows.length;
  ctx.progress.bytesTotal = rows.reduce((n, r) => n + r.size, 0);
  let compressed = 0;
  let already = 0;
  let notSmaller = 0;
  let skipped = 0;
  let refused = 0;
  let before = 0;
  let after = 0;
  const refusedList: string[] = [];
  const refuse = (oid: Oid, why: string): void => {
    refused++;
    if (refusedList.length < LISTED_MAX) refusedList.push(oid);
    deps.log('compress refused an object', { level: 'warn', repo: repo.key, oid, detail: why });
  };

  const complete = await forEachLimited(rows, tasks.parallelism, ctx.signal, async (row) => {
    const meter = ctx.progress.meter();
    let reader: BlobReader | null = null;
    const forget = smaller?.expect(row.oid, row.size) ?? ((): void => undefined);
    try {
      // Not in the backend itself (a small object the journal still holds): nothing to replace.
      if (row.size < MIN_FRAMED_SIZE || (await objects.findInRepo(repo.key, row.oid)) === null || (await backend.stat(row.oid)) === null) {
        skipped++;
        return;
      }
      try {
        reader = await store.open(row.oid);
      } catch (e) {
        return refuse(row.oid, (e as Error).message);
      }
      if (reader === null) {
        skipped++; // deleted by retain since the listing
        return;
      }
      if (reader.framed === true) {
        already++;
        before += reader.storedSize;
        after += reader.storedSize;
        if (!dryRun && reader.storedSize !== row.storedSize) await objects.setStoredSize(row.oid, reader.storedSize); // a killed run's replace
        return;
      }
      const plain = reader;
      let put: PutResult;
      try {
        // The framed copy sits beside the plain one until it replaces it: kept out of the disk's reserve.
        if (!dryRun) deps.uploads.admitBytes(row.size);
        const w = await writer.createWriter(row.oid, { expectedSize: row.size, replace: true });
        put = await withObjectPull(plain, (pull) => pumpInto(pull, w, (n) => reportBytes(meter.buffer, n)));
      } catch (e) {
        // A full store fails the job (as an upload gets 507); anything else is this object's problem.
        if (isLfsError(e) && e.status === 507) throw e;
        return refuse(row.oid, (e as Error).message);
      }
      before += row.size;
      if (put.storedSize >= row.size) {
        after += row.size;
        notSmaller++;
        return;
      }
      after += put.storedSize;
      if (!dryRun) await objects.setStoredSize(row.oid, put.storedSize);
      compressed++;
    } finally {
      forget();
      await reader?.close().catch(() => undefined);
      ctx.progress.objectDone(row.size, meter);
    }
  });
  return {
    objects: rows.length,
    compressed,
    already_compressed: already,
    not_smaller: notSmaller,
    skipped,
    refused,
    bytes_before: before,
    bytes_after: after,
    saved: before - after,
    dry_run: dryRun,
    complete,
    refused_objects: refusedList,
  };
}

/** The backend as the compress job writes it: a copy replaces the plain one only if it takes fewer bytes, else it is aborted at finish and reports its size. */
class SmallerOnly extends ForwardingBlobStore {
  readonly #limits = new Map<string, number>();

  expect(oid: Oid, plainSize: number): () => void {
    this.#limits.set(oid, plainSize);
    return () => this.#limits.delete(oid);
  }

  override get presigner(): BlobStore['presigner'] {
    return null;
  }

  override get legacy(): BlobStore['legacy'] {
    return null;
  }

  override async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const limit = this.#limits.get(oid);
    const inner = await this.inner.createWriter(oid, options);
    return limit === undefined ? inner : new SmallerOnlyWriter(inner, limit);
  }
}

class SmallerOnlyWriter implements ObjectWriter {
  readonly #inner: ObjectWriter;
  readonly #limit: number;
  #written = 0;

  constructor(inner: ObjectWriter, limit: number) {
    this.#inner = inner;
    this.#limit = limit;
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    this.#written += chunk.byteLength;
    return this.#inner.write(chunk, release);
  }

  onDrain(listener: () => void): void {
    this.#inner.onDrain(listener);
  }

  async finish(): Promise<PutResult> {
    if (this.#written < this.#limit) return this.#inner.finish();
    await this.#inner.abort();
    return { size: this.#limit, storedSize: this.#written, created: false };
  }

  abort(): Promise<void> {
    return this.#inner.abort();
  }
}

import { pages, type IndexTables, type TableRow } from '../../db/index-tables.js';
import { isLfsError } from '../../errors/errors.js';
import type { Oid } from '../../protocol/oid.js';
import type { S3BlobStore } from '../../store/s3/s3-store.js';
import type { BlobStore } from '../../store/types.js';
import { pumpInto, withObjectPull } from '../maintenance/object-io.js';
import { forEachLimited } from '../maintenance/worker-tasks.js';

/** The store's figures (with --objects). */
export interface ObjectsReport {
  readonly total: number;
  readonly copied: number;
  readonly bytes_copied: number;
  /** Already in the bucket at the right size (an earlier run's): skipped. */
  readonly already_in_bucket: number;
  /** Quarantined objects: their bytes were set aside, so there is nothing to copy. */
  readonly quarantined: number;
  /** In the index but not on disk. */
  readonly missing_on_disk: string[];
  /** On disk, but the bytes do not hash to their oid or have the wrong size. */
  readonly refused: { oid: string; reason: string }[];
  /** After the copy, not in the bucket at the stored size the target index records. */
  readonly absent_from_bucket: string[];
}

/** Objects copied at once: each waits mostly on the bucket's round trips (a HEAD, then the PUT). */
const OBJECT_LANES = 8;
/**
 * Copies the objects table together with the objects' bytes: each page's objects are put in the
 * bucket first (read through the disk stack, written through the bucket's, so sha256 and size are
 * verified on the way and compression is the target's), then the page's rows are written with the
 * bucket's stored size. An object already in the bucket at its size is skipped.
 */
export class ObjectCopy {
  readonly #from: BlobStore;
  readonly #to: BlobStore;
  readonly #progress: (line: string) => void;
  #copied = 0;
  #bytes = 0;
  #skipped = 0;
  #quarantined = 0;
  readonly #missing: string[] = [];
  readonly #refused: { oid: string; reason: string }[] = [];

  constructor(from: BlobStore, to: BlobStore, progress: (line: string) => void) {
    this.#from = from;
    this.#to = to;
    this.#progress = progress;
  }

  async run(source: IndexTables, target: IndexTables, total: number): Promise<number> {
    const quarantined = await quarantinedOids(source);
    let done = 0;
    let added = 0;
    const never = new AbortController().signal;
    for await (const page of pages(source, 'objects')) {
      const rows: TableRow[] = [];
      await forEachLimited(page, OBJECT_LANES, never, async (row) => {
        const stored = quarantined.has(row.oid as string) ? null : await this.#one(row.oid as Oid, row.size as number);
        if (stored === null && quarantined.has(row.oid as string)) this.#quarantined++;
        // The row goes in either way: references point at it; the report names what has no bytes.
        rows.push(stored === null ? row : { ...row, stored_size: stored });
        done++;
      });
      added += await target.write('objects', rows);
      await target.rewrite('objects', rows);
      this.#progress(`objects: ${done}/${total} (${this.#copied} copied, ${this.#skipped} already in the bucket)`);
    }
    return added;
  }

  /** Puts one object in the bucket unless it is there at its size; its stored size there, or null when it could not. */
  async #one(oid: Oid, size: number): Promise<number | null> {
    const there = await this.#to.stat(oid);
    if (there !== null && there.size === size) {
      this.#skipped++;
      return there.storedSize;
    }
    const reader = await this.#from.open(oid);
    if (reader === null) {
      this.#missing.push(oid);
      return null;
    }
    try {
      // replace: a copy of the wrong size (a torn earlier attempt by another tool) is overwritten.
      const writer = await this.#to.createWriter(oid, { expectedSize: size, replace: there !== null });
      const put = await withObjectPull(reader, (pull) => pumpInto(pull, writer, () => undefined));
      this.#copied++;
      this.#bytes += size;
      return put.storedSize;
    } catch (e) {
      if (!isLfsError(e) || (e.code !== 'LFS_ERR_DIGEST_MISMATCH' && e.code !== 'LFS_ERR_SIZE_MISMATCH')) throw e;
      this.#refused.push({ oid, reason: e.message });
      return null;
    } finally {
      await reader.close();
    }
  }

  /** A dry run's figures: how many objects the bucket holds already. */
  async survey(source: IndexTables): Promise<ObjectsReport> {
    let total = 0;
    for await (const page of pages(source, 'objects')) {
      for (const row of page) {
        total++;
        const there = await this.#to.stat(row.oid as Oid);
        if (there !== null && there.size === row.size) this.#skipped++;
      }
    }
    return this.#report(total, []);
  }

  /** Every object of the target index that is not quarantined must be in the bucket at the stored size the index records. */
  async verify(target: IndexTables, raw: S3BlobStore): Promise<ObjectsReport> {
    const inBucket = new Map<string, number>();
    for await (const o of raw.list()) inBucket.set(o.oid, o.storedSize);
    // Objects already reported (no bytes on disk, bytes refused) are not counted again here.
    const skip = new Set([...(await quarantinedOids(target)), ...this.#missing, ...this.#refused.map((r) => r.oid)]);
    const absent: string[] = [];
    let total = 0;
    for await (const page of pages(target, 'objects')) {
      for (const row of page) {
        total++;
        if (skip.has(row.oid as string)) continue;
        if (inBucket.get(row.oid as string) !== row.stored_size) absent.push(row.oid as string);
      }
    }
    return this.#report(total, absent);
  }

  #report(total: number, absent: string[]): ObjectsReport {
    return {
      total,
      copied: this.#copied,
      bytes_copied: this.#bytes,
      already_in_bucket: this.#skipped,
      quarantined: this.#quarantined,
      missing_on_disk: this.#missing,
      refused: this.#refused,
      absent_from_bucket: absent,
    };
  }
}

async function quarantinedOids(tables: IndexTables): Promise<Set<string>> {
  const out = new Set<string>();
  for await (const page of pages(tables, 'quarantine')) for (const r of page) out.add(r.oid as string);
  return out;
}

import { pages, type IndexTables, type TableRow } from '../../db/index-tables.js';
import { isLfsError } from '../../errors/errors.js';
import type { Hasher } from '../../format/frame-codec.js';
import type { Oid } from '../../protocol/oid.js';
import type { S3BlobStore } from '../../store/s3/s3-store.js';
import type { BlobReader, BlobStore } from '../../store/types.js';
import { digestOf, pumpInto, withObjectPull } from '../maintenance/object-io.js';
import { forEachLimited } from '../maintenance/worker-tasks.js';
import { storedSealed } from './migration-keys.js';

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
  /** Read back through the bucket's stack (encrypted sources): copies that did not yield their oid, or are stored plain where they must be sealed. */
  readonly unreadable_in_bucket: { oid: string; reason: string }[];
}

/** Where the objects go: the bucket's stack, and what is checked of its copies. */
export interface BucketSide {
  /** verify(compress(encrypt?(bucket))): objects are written, and read back, through it. */
  readonly store: BlobStore;
  /** The bucket under every layer: its listing, and the stored head of a copy. */
  readonly raw: S3BlobStore;
  /** New copies are sealed (encryption on): a plain copy an earlier run left is written again, sealed. */
  readonly sealed: boolean;
  /** Verify reads every copy back through `store` and hashes it (a source with keys); null: stored sizes only, as for plain stores. */
  readonly readBack: Hasher | null;
}

/** A source copy that is not its object: refused and reported, the others still copied. A damaged one fails to authenticate (encrypted) or to decode (framed). */
const NOT_THE_OBJECT = new Set(['LFS_ERR_DIGEST_MISMATCH', 'LFS_ERR_SIZE_MISMATCH', 'LFS_ERR_OBJECT_DAMAGED']);

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
  readonly #bucket: BucketSide;
  readonly #progress: (line: string) => void;
  #copied = 0;
  #bytes = 0;
  #skipped = 0;
  #quarantined = 0;
  readonly #missing: string[] = [];
  readonly #refused: { oid: string; reason: string }[] = [];

  constructor(from: BlobStore, bucket: BucketSide, progress: (line: string) => void) {
    this.#from = from;
    this.#to = bucket.store;
    this.#bucket = bucket;
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
    if (there !== null && there.size === size && (!this.#bucket.sealed || (await storedSealed(this.#bucket.raw, oid)))) {
      this.#skipped++;
      return there.storedSize;
    }
    let reader: BlobReader | null = null;
    try {
      reader = await this.#from.open(oid);
      if (reader === null) {
        this.#missing.push(oid);
        return null;
      }
      const from = reader;
      // replace: a copy of the wrong size (a torn earlier attempt by another tool) is overwritten.
      // A plain copy where copies are sealed is replaced too (an earlier run without the keys).
      const writer = await this.#to.createWriter(oid, { expectedSize: size, replace: there !== null });
      const put = await withObjectPull(from, (pull) => pumpInto(pull, writer, () => undefined));
      this.#copied++;
      this.#bytes += size;
      return put.storedSize;
    } catch (e) {
      if (!isLfsError(e) || !NOT_THE_OBJECT.has(e.code)) throw e;
      this.#refused.push({ oid, reason: e.message });
      return null;
    } finally {
      await reader?.close();
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

  /**
   * Every object of the target index that is not quarantined must be in the bucket at the stored size
   * the index records; with readBack, it must also read back through the bucket's stack (decrypted
   * with its data key from the target index) to bytes that hash to its oid, and be sealed where new
   * copies are.
   */
  async verify(target: IndexTables): Promise<ObjectsReport> {
    const inBucket = new Map<string, number>();
    for await (const o of this.#bucket.raw.list()) inBucket.set(o.oid, o.storedSize);
    // Objects already reported (no bytes on disk, bytes refused) are not counted again here.
    const skip = new Set([...(await quarantinedOids(target)), ...this.#missing, ...this.#refused.map((r) => r.oid)]);
    const absent: string[] = [];
    const unreadable: { oid: string; reason: string }[] = [];
    let total = 0;
    const never = new AbortController().signal;
    for await (const page of pages(target, 'objects')) {
      await forEachLimited(page, OBJECT_LANES, never, async (row) => {
        total++;
        const oid = row.oid as Oid;
        if (skip.has(oid)) return;
        if (inBucket.get(oid) !== row.stored_size) absent.push(oid);
        else if (this.#bucket.readBack !== null) {
          const why = await this.#readsBack(oid, row.size as number, this.#bucket.readBack);
          if (why !== null) unreadable.push({ oid, reason: why });
        }
      });
      if (this.#bucket.readBack !== null) this.#progress(`verifying: ${total} objects read back from the bucket`);
    }
    return this.#report(total, absent, unreadable);
  }

  /** Null when the bucket's copy reads back to `size` bytes hashing to `oid`; otherwise why not. */
  async #readsBack(oid: Oid, size: number, hasher: Hasher): Promise<string | null> {
    try {
      if (this.#bucket.sealed && !(await storedSealed(this.#bucket.raw, oid))) return 'stored plain where copies are sealed';
      const reader = await this.#to.open(oid);
      if (reader === null) return 'not in the bucket';
      try {
        const got = await withObjectPull(reader, (pull) => digestOf(pull, reader.size, hasher, () => undefined));
        if (got.size !== size) return `reads back as ${got.size} bytes, not ${size}`;
        return got.sha256 === oid ? null : `reads back as sha256 ${got.sha256}`;
      } finally {
        await reader.close();
      }
    } catch (e) {
      return (e as Error).message;
    }
  }

  #report(total: number, absent: string[], unreadable: { oid: string; reason: string }[] = []): ObjectsReport {
    return {
      total,
      copied: this.#copied,
      bytes_copied: this.#bytes,
      already_in_bucket: this.#skipped,
      quarantined: this.#quarantined,
      missing_on_disk: this.#missing,
      refused: this.#refused,
      absent_from_bucket: absent,
      unreadable_in_bucket: unreadable,
    };
  }
}

async function quarantinedOids(tables: IndexTables): Promise<Set<string>> {
  const out = new Set<string>();
  for await (const page of pages(tables, 'quarantine')) for (const r of page) out.add(r.oid as string);
  return out;
}

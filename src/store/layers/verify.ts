import { lfsError } from '../../errors/errors.js';
import type { Hasher, StreamHasher } from '../../format/frame-codec.js';
import type { Oid } from '../../protocol/oid.js';
import { Backlog } from '../backlog.js';
import { ChunkGatherer, blockPool } from '../buffer-pool.js';
import { IncomingCheck } from '../incoming-check.js';
import type { BlobStore, ObjectWriter, PutResult, UploadJournal, WriterOptions } from '../types.js';
import { ForwardingBlobStore } from './forwarding.js';

/** Bytes of one upload handed on and not yet hashed and stored before the socket pauses (at least two blocks). */
const MAX_BYTES_IN_FLIGHT = 4 << 20;
/**
 * Uploads from this size (or of unknown size) are hashed off the event loop by the Hasher (the sha256
 * addon's native thread, or a hash thread without it); smaller ones in line, with no hand-over per block.
 */
export const OFF_LOOP_MIN_SIZE = 8 << 20;
/** Without the addon: below this size an upload is hashed in line rather than wait for a hash thread to start. */
const HASH_THREAD_WAIT_SIZE = 64 << 20;

/** Whether an upload of `size` bytes is hashed off the event loop (by a hash thread once it is up). */
export function hashedOffLoop(size: number): boolean {
  return size >= OFF_LOOP_MIN_SIZE;
}

/** Starts a hash thread that is not up ahead of an upload of `size` bytes it will hash (a batch announced it). */
export function warmHasherFor(hasher: Hasher, size: number): void {
  if (hashedOffLoop(size) && !hasher.ready) void hasher.warm();
}

/**
 * The verify layer, outermost: sha256 and size of every upload are checked before the store below
 * may make the object visible; a wrong digest or short body aborts the inner write.
 *
 * It is also where an upload's bytes are copied, once, into aligned shared blocks of the inner
 * `blockSize` that go to the hasher and down the stack alike; MAX_BYTES_IN_FLIGHT bounds memory.
 */
export class VerifyingBlobStore extends ForwardingBlobStore {
  readonly #hasher: Hasher | null;
  readonly #journal: UploadJournal | null;

  /** `hasher`: where large uploads are hashed (off the event loop); null hashes everything in line. */
  constructor(inner: BlobStore, hasher: Hasher | null) {
    super(inner);
    this.#hasher = hasher;
    const journal = inner.journal;
    // Journaled uploads are verified as any other: only verified bytes reach the journal.
    this.#journal = journal === null ? null : { createWriter: (repo, oid, options) => this.#verifying(oid, options, (o) => journal.createWriter(repo, oid, o)) };
  }

  override get journal(): UploadJournal | null {
    return this.#journal;
  }

  override createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    return this.#verifying(oid, options, (o) => this.inner.createWriter(oid, o));
  }

  async #verifying<P extends PutResult>(oid: Oid, options: WriterOptions, create: (options: WriterOptions) => Promise<ObjectWriter & { finish(): Promise<P> }>): Promise<VerifyingWriter<P>> {
    const size = options.expectedSize;
    const check = options.sha256 === undefined ? new IncomingCheck(oid, size, this.#offLoopStream(size)) : new IncomingCheck(oid, size, null, options.sha256);
    try {
      return new VerifyingWriter(check, await create(options), this.inner.blockSize);
    } catch (e) {
      check.discard();
      throw e;
    }
  }

  /** The hasher's stream for an upload of `size` bytes (null: unknown), or null to hash it in line. */
  #offLoopStream(size: number | null): StreamHasher | null {
    const hasher = this.#hasher;
    if (hasher === null || (size !== null && !hashedOffLoop(size))) return null;
    if (hasher.ready || size === null || size >= HASH_THREAD_WAIT_SIZE) return hasher.open();
    warmHasherFor(hasher, size);
    return null;
  }
}

class VerifyingWriter<P extends PutResult> implements ObjectWriter {
  readonly #check: IncomingCheck;
  readonly #inner: ObjectWriter & { finish(): Promise<P> };
  readonly #gather: ChunkGatherer;
  readonly #backlog: Backlog;
  /** The inner writer asked to wait (returned false) and has not drained yet. */
  #innerBlocked = false;
  /** write() returned false: the listener is owed a call once both have room. */
  #owed = false;
  #listener: (() => void) | null = null;
  #failed: unknown = null;

  constructor(check: IncomingCheck, inner: ObjectWriter & { finish(): Promise<P> }, blockSize: number) {
    this.#check = check;
    this.#inner = inner;
    this.#backlog = new Backlog(Math.max(2, Math.floor(MAX_BYTES_IN_FLIGHT / blockSize)));
    const pool = blockPool(blockSize);
    this.#gather = new ChunkGatherer(pool, (block, length) => this.#handOn(block, length, () => pool.giveView(block)));
    this.#backlog.onDrain(() => this.#maybeDrain());
    inner.onDrain(() => {
      this.#innerBlocked = false;
      this.#maybeDrain();
    });
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    try {
      if (this.#failed !== null) throw this.#failed;
      try {
        this.#check.take(chunk);
        this.#gather.add(chunk);
      } catch (e) {
        throw (this.#failed = e);
      }
    } finally {
      release?.(); // copied into a block (or refused): the caller's chunk is free
    }
    // full() (unlike hasRoom) arms the backlog's drain callback.
    if (!this.#backlog.full() && !this.#innerBlocked) return true;
    this.#owed = true;
    return false;
  }

  onDrain(listener: () => void): void {
    this.#listener = listener;
  }

  #maybeDrain(): void {
    if (this.#owed && this.#backlog.hasRoom() && !this.#innerBlocked) {
      this.#owed = false;
      this.#listener?.();
    }
  }

  /** A full block (or the last one) goes to the hasher and down the stack at once; freed when both are done. */
  #handOn(block: Buffer, length: number, free: () => void): void {
    const done = this.#backlog.add(2, free);
    const bytes = block.subarray(0, length);
    this.#check.hashGathered(bytes, done);
    try {
      if (!this.#inner.write(bytes, done)) this.#innerBlocked = true;
    } catch (e) {
      this.#failed ??= e;
      throw e;
    }
  }

  async finish(): Promise<P> {
    if (this.#failed !== null) throw this.#failed;
    try {
      this.#gather.flush();
      await this.#check.verify();
    } catch (e) {
      this.#failed = e;
      await this.#inner.abort();
      throw e;
    }
    const r = await this.#inner.finish();
    return { ...r, size: this.#check.count } as P; // P's own fields (a journal's keeper) pass through
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#gather.discard();
    this.#check.discard();
    await this.#inner.abort();
  }
}

import { randomBytes } from 'node:crypto';
import { open as openFile } from 'node:fs/promises';
import type { KeyRing } from '../../crypto/key-ring.js';
import type { DataKeyIndex, DataKeyRow } from '../../db/index-types.js';
import { lfsError } from '../../errors/errors.js';
import {
  CRYPT_FRAME_SIZE,
  FrameCipher,
  HEADER_SIZE,
  MAGIC,
  TAG_SIZE,
  damaged,
  decodeHeader,
  encodeHeader,
  frameOffset,
  geometry,
  looksEncrypted,
  storedSizeOf,
  type CryptGeometry,
  type CryptHeader,
} from '../../format/encrypted-format.js';
import type { Oid } from '../../protocol/oid.js';
import { ChunkGatherer, copyBytes, directBuffers, giveReadBuffer, IO_CHUNK, takeReadBuffer } from '../buffer-pool.js';
import { fillFrom } from '../fill-from.js';
import type { BlobReader, BlobStat, BlobStore, ChunkSource, InLineObject, LegacyLayout, ObjectWriter, Presigner, PutResult, WriterOptions } from '../types.js';
import { ForwardingBlobStore } from './forwarding.js';

/** What the layer needs to encrypt and decrypt: the wrapped data keys, the key ring, and whether new objects are encrypted. */
export interface EncryptionParts {
  readonly keys: DataKeyIndex;
  /** Null when no key is given: encrypted objects then fail to read (never served as ciphertext). */
  readonly ring: KeyRing | null;
  readonly encryptNew: boolean;
  /** Plaintext bytes per frame of new copies (CRYPT_FRAME_SIZE unless a test writes another); reads take each copy's own. */
  readonly frameSize?: number;
}

/** Reads up to this many stored bytes at once when opening: a one-frame object in one read. */
const ONE_FRAME = HEADER_SIZE + CRYPT_FRAME_SIZE + TAG_SIZE;

/**
 * The encrypting layer (format/encrypted-format.ts, docs/encryption.md): on the backend, under
 * compression (what it encrypts is what compression stored; ciphertext does not compress). Each
 * object copy gets a random data key, wrapped by the key ring's current key into the index
 * (DataKeyIndex) before the copy becomes visible; its id is in the copy's header, so concurrent
 * copies of one oid each find their own key. Frames of CRYPT_FRAME_SIZE plaintext bytes are sealed
 * with AES-256-GCM on the event loop, one call per frame (crypto/frame-gcm.ts: a 256 KiB frame costs
 * ~60 µs), at most one frame held per writer.
 *
 * Reads take both forms: a stored object is encrypted when it starts with the header magic
 * (looksEncrypted), otherwise it is served as it is (objects stored before encryption was turned
 * on, or with it off). Opening an encrypted object reads its header and authenticates its final
 * frame, so its size is proven before a byte is served; ranges decrypt only the frames they touch.
 * A frame that does not authenticate fails the read as LFS_ERR_OBJECT_DAMAGED, as a damaged
 * compressed frame does: a download fails rather than serving other bytes, and an audit quarantines.
 */
export class EncryptingBlobStore extends ForwardingBlobStore {
  readonly #parts: EncryptionParts;
  readonly #legacy: LegacyLayout | null;

  constructor(inner: BlobStore, parts: EncryptionParts) {
    super(inner);
    this.#parts = parts;
    const legacy = inner.legacy;
    // Adopting a verified file is a hard link of its plaintext: with encryption on it is copied in through this layer instead.
    this.#legacy = legacy === null || !parts.encryptNew ? legacy : { ...bindAll(legacy), adoptFile: (oid, path) => this.#adoptByCopy(oid, path) };
  }

  /** A bucket would hand clients ciphertext: with a key ring every transfer goes through the server. */
  override get presigner(): Presigner | null {
    return this.#parts.ring === null ? this.inner.presigner : null;
  }

  override get legacy(): LegacyLayout | null {
    return this.#legacy;
  }

  override async createWriter(oid: Oid, options: WriterOptions): Promise<ObjectWriter> {
    const ring = this.#parts.ring;
    if (ring === null || !this.#parts.encryptNew) return new PlainWriter(await this.inner.createWriter(oid, options));
    const previous = options.replace === true ? await this.#dataKeyIdOf(oid) : null;
    const frameSize = this.#parts.frameSize ?? CRYPT_FRAME_SIZE;
    // The backend is told the stored size (a small plain write is taken whole at its exact size).
    const expectedSize = options.expectedSize === null ? null : storedSizeOf(options.expectedSize, frameSize);
    const inner = await this.inner.createWriter(oid, { ...options, expectedSize });
    // A framed write's length is not the announced (logical) size: its final frame is known only at the end.
    const announced = options.framed === true ? null : options.expectedSize;
    return new EncryptingWriter(inner, oid, ring, this.#parts.keys, previous, frameSize, announced);
  }

  override async open(oid: Oid): Promise<BlobReader | null> {
    const stored = await this.inner.open(oid);
    if (stored === null) return null;
    try {
      // A one-frame object is read whole at once only where new objects are encrypted: elsewhere most
      // copies are plain, and reading one whole to sniff its head would read it twice.
      const whole = this.#parts.encryptNew && this.#parts.ring !== null && stored.storedSize <= ONE_FRAME;
      const head = Buffer.alloc(Math.min(stored.storedSize, whole ? ONE_FRAME : HEADER_SIZE));
      if (head.byteLength >= HEADER_SIZE) await stored.readAt(head, 0);
      if (!looksEncrypted(head, stored.storedSize)) return stored;
      const header = decodeHeader(head);
      const g = geometry(stored.storedSize, header.frameSize);
      const dataKey = await this.#dataKey(header);
      const cipher = new FrameCipher(dataKey, header.bytes, oidBytes(oid));
      dataKey.fill(0);
      const last = g.frames - 1;
      const lastScratch = new Scratch();
      try {
        const lastStored = head.byteLength === stored.storedSize ? head.subarray(frameOffset(g, last)) : await readStored(stored, frameOffset(g, last), g.storedSize - frameOffset(g, last), lastScratch);
        const lastPlain = lastStored.subarray(0, lastStored.byteLength - TAG_SIZE);
        cipher.openInto(g, last, lastStored, lastPlain);
        return new DecryptingReader(stored, { cipher, dataKeyId: header.dataKeyId, g, lastPlain }, lastScratch);
      } catch (e) {
        lastScratch.release();
        throw e;
      }
    } catch (e) {
      await stored.close();
      throw e;
    }
  }

  override openInLine(oid: Oid): InLineObject | undefined {
    const held = this.inner.openInLine?.(oid);
    if (held === undefined || !looksEncrypted(held.bytes, held.bytes.byteLength)) return held;
    // Its key is in the index (a round trip): open decides.
    held.release();
    return undefined;
  }

  override async stat(oid: Oid): Promise<BlobStat | null> {
    // Absent or too short to be encrypted: no need to open it (the journal asks this of objects not written yet).
    const below = await this.inner.stat(oid);
    if (below === null || below.storedSize < HEADER_SIZE + TAG_SIZE) return below;
    const stored = await this.inner.open(oid);
    if (stored === null) return null;
    try {
      const head = Buffer.alloc(HEADER_SIZE);
      await stored.readAt(head, 0);
      const size = looksEncrypted(head, stored.storedSize) ? geometry(stored.storedSize, decodeHeader(head).frameSize).size : stored.size;
      return { size, storedSize: stored.storedSize, framed: stored.framed };
    } finally {
      await stored.close();
    }
  }

  /** Deletes the copy, then its data key (a reader already open holds the key it unwrapped). */
  override async delete(oid: Oid): Promise<boolean> {
    const id = await this.#dataKeyIdOf(oid);
    const deleted = await this.inner.delete(oid);
    if (deleted && id !== null) await this.#parts.keys.deleteDataKey(id);
    return deleted;
  }

  /**
   * The data key id of the stored copy, only once the copy authenticated under it: a header alone
   * could name another object's key, which a delete or replace would then remove. Null when there
   * is no copy, it is plain, or it does not authenticate (its row, if any, is left).
   */
  async #dataKeyIdOf(oid: Oid): Promise<string | null> {
    try {
      const r = await this.open(oid);
      await r?.close();
      return r instanceof DecryptingReader ? r.dataKeyId : null;
    } catch {
      return null;
    }
  }

  async #dataKey(header: CryptHeader): Promise<Buffer> {
    const ring = this.#parts.ring;
    if (ring === null) throw lfsError('LFS_ERR_INTERNAL', 'The stored object is encrypted and no encryption key is configured');
    const row = await this.#parts.keys.getDataKey(header.dataKeyId);
    if (row === null) throw damaged(`no data key ${header.dataKeyId} in the index`);
    try {
      return ring.unwrap(row.kekId, row.dataKeyId, row.wrapped);
    } catch (e) {
      throw damaged((e as Error).message);
    }
  }

  /** LegacyLayout.adoptFile with encryption on: the verified file is copied in through this layer (its bytes never linked in plain). */
  async #adoptByCopy(oid: Oid, path: string): Promise<boolean> {
    const fh = await openFile(path, 'r');
    try {
      const size = (await fh.stat()).size;
      const w = await this.createWriter(oid, { expectedSize: size });
      try {
        const buf = Buffer.allocUnsafe(1 << 20);
        for (let at = 0; at < size; ) {
          const { bytesRead } = await fh.read(buf, 0, Math.min(buf.byteLength, size - at), at);
          if (bytesRead === 0) throw new Error(`short read of ${path} at ${at}`);
          w.write(buf.subarray(0, bytesRead));
          at += bytesRead;
        }
        return (await w.finish()).created;
      } catch (e) {
        await w.abort();
        throw e;
      }
    } finally {
      await fh.close();
    }
  }
}

/** The methods of a legacy layout bound to it, so one can be replaced in a copy. */
function bindAll(l: LegacyLayout): LegacyLayout {
  return {
    legacySizeSync: (repo, oid) => l.legacySizeSync(repo, oid),
    openLegacy: (repo, oid) => l.openLegacy(repo, oid),
    scanLegacy: (repo, listed) => l.scanLegacy(repo, listed),
    setAsideLegacy: (repo, oid, suffix) => l.setAsideLegacy(repo, oid, suffix),
    maintenanceStaging: () => l.maintenanceStaging(),
    adoptFile: (oid, path) => l.adoptFile(oid, path),
    purge: (path) => l.purge(path),
  };
}

const oidBytes = (oid: Oid): Buffer => Buffer.from(oid, 'hex');

async function readStored(stored: BlobReader, position: number, length: number, scratch: Scratch): Promise<Buffer> {
  const b = scratch.take(length);
  await stored.readAt(b, position);
  return b;
}

/**
 * A transfer's working bytes from the read pool's 1 MiB buffers where they fit (a buffer of its own
 * past that): fresh megabyte-sized buffers per transfer let the allocator's heap grow, as plain
 * reads' pooled ones do not. release() once nothing refers to them.
 */
class Scratch {
  #whole: Uint8Array | null = null;
  #bytes: Buffer | null = null;

  /** The buffer, taken with `length` bytes at its first use. */
  take(length: number): Buffer {
    if (this.#bytes !== null) return this.#bytes;
    const whole = length <= IO_CHUNK ? takeReadBuffer() : new Uint8Array(length);
    this.#whole = whole;
    return (this.#bytes = Buffer.from(whole.buffer, whole.byteOffset, length));
  }

  release(): void {
    if (this.#whole !== null && this.#whole.byteLength === IO_CHUNK) giveReadBuffer(this.#whole);
    this.#whole = this.#bytes = null;
  }
}

/** An opened encrypted copy: its frames' cipher, geometry and the plaintext of its final frame (authenticated at open). */
interface OpenedCopy {
  readonly cipher: FrameCipher;
  readonly dataKeyId: string;
  readonly g: CryptGeometry;
  readonly lastPlain: Buffer;
}

class DecryptingReader implements BlobReader {
  readonly #stored: BlobReader;
  readonly #copy: OpenedCopy;
  /** Where the final frame's bytes are (lastPlain), given back at close. */
  readonly #last: Scratch;

  constructor(stored: BlobReader, copy: OpenedCopy, last: Scratch) {
    this.#stored = stored;
    this.#copy = copy;
    this.#last = last;
  }

  get size(): number {
    return this.#copy.g.size;
  }

  get dataKeyId(): string {
    return this.#copy.dataKeyId;
  }

  get storedSize(): number {
    return this.#stored.storedSize;
  }

  get framed(): boolean | null {
    return this.#stored.framed;
  }

  read(start: number, end: number): ChunkSource {
    return new DecryptingSource(this.#stored, this.#copy, start, Math.min(end, this.#copy.g.size - 1));
  }

  readAt(into: Uint8Array, position: number): Promise<void> {
    return fillFrom(this.read(position, position + into.byteLength - 1), into);
  }

  close(): Promise<void> {
    this.#last.release();
    return this.#stored.close();
  }
}

/** Frames a read returns as one chunk: about the backend's 1 MiB reads. */
const FRAMES_PER_CHUNK = 4;

/**
 * Plaintext bytes [start, end] of an encrypted copy: the stored bytes of the frames they touch are
 * streamed from the backend in one ranged read, each frame authenticated before any of it is
 * returned. Frames are opened on the event loop straight from the backend's chunks (a frame spanning
 * two is copied together first) into a buffer of FRAMES_PER_CHUNK frames, returned as one chunk:
 * as many sends per byte as a plain read. (Opening them on libuv's pool instead, one batch ahead,
 * cost more CPU than it saved on a 2-core host: native-bench/NOTES.md.)
 */
class DecryptingSource implements ChunkSource {
  readonly #stored: BlobReader;
  readonly #c: OpenedCopy;
  readonly #start: number;
  readonly #end: number;
  #next: number;
  readonly #lastFrame: number;
  #src: ChunkSource | null = null;
  #rest: Uint8Array | null = null;
  #restAt = 0;
  /** A frame's stored bytes where they span the backend's chunks, and the plaintext chunk returned. */
  readonly #scratch = { frame: new Scratch(), plain: new Scratch() };

  constructor(stored: BlobReader, copy: OpenedCopy, start: number, end: number) {
    this.#stored = stored;
    this.#c = copy;
    this.#start = start;
    this.#end = end;
    const F = copy.g.frameSize;
    this.#next = Math.floor(start / F);
    this.#lastFrame = end < start ? -1 : Math.floor(end / F);
  }

  async next(): Promise<Uint8Array | null> {
    if (this.#next > this.#lastFrame) return null;
    const g = this.#c.g;
    const first = this.#next;
    const from = first * g.frameSize;
    let plain: Buffer;
    if (first === g.frames - 1) {
      plain = this.#c.lastPlain;
      this.#next++;
    } else {
      // Up to FRAMES_PER_CHUNK frames, never the final one (opened at open): all whole frames.
      const to = Math.min(this.#lastFrame, g.frames - 2, first + FRAMES_PER_CHUNK - 1);
      // Taken at the first chunk, the largest: later ones need no more.
      const out = this.#scratch.plain.take(Math.min(FRAMES_PER_CHUNK, g.frames - 1 - first) * g.frameSize);
      for (let i = first; i <= to; i++) await this.#open(i, out.subarray((i - first) * g.frameSize));
      this.#next = to + 1;
      plain = out.subarray(0, (to + 1 - first) * g.frameSize);
    }
    return plain.subarray(Math.max(0, this.#start - from), Math.min(plain.byteLength, this.#end - from + 1));
  }

  /** Opens frame i (a whole one: not the final frame) into `into`. */
  async #open(i: number, into: Buffer): Promise<void> {
    const g = this.#c.g;
    if (this.#src === null) {
      // Every frame this read needs but the final one (held since open), in one ranged read.
      const to = Math.min(this.#lastFrame, g.frames - 2);
      this.#src = this.#stored.read(frameOffset(g, i), frameOffset(g, to + 1) - 1);
    }
    const need = g.frameSize + TAG_SIZE;
    if (this.#rest !== null && this.#rest.byteLength - this.#restAt >= need) {
      // The whole frame is in the chunk at hand (most are: the backend reads in 1 MiB pieces): no copy.
      const stored = this.#rest.subarray(this.#restAt, this.#restAt + need);
      this.#restAt += need;
      this.#c.cipher.openInto(g, i, stored, into);
      return;
    }
    const buf = this.#scratch.frame.take(need);
    for (let have = 0; have < need; ) {
      if (this.#rest === null || this.#restAt === this.#rest.byteLength) {
        this.#rest = await this.#src.next();
        this.#restAt = 0;
        if (this.#rest === null) throw damaged(`frame ${i} cut short`);
      }
      const n = Math.min(need - have, this.#rest.byteLength - this.#restAt);
      copyBytes(buf, have, this.#rest.subarray(this.#restAt, this.#restAt + n));
      have += n;
      this.#restAt += n;
    }
    this.#c.cipher.openInto(g, i, buf, into);
  }

  async close(): Promise<void> {
    const src = this.#src;
    this.#src = null;
    this.#rest = null;
    this.#scratch.frame.release();
    this.#scratch.plain.release();
    await src?.close();
  }
}

/**
 * Seals one object copy into the inner writer: a fresh data key, the header, then frames of
 * `frameSize` plaintext bytes, each sealed in one call once its bytes are in: from the caller's
 * chunk where a whole frame lies in it (the verify layer above hands on large blocks), else from a
 * frame buffer; into the aligned block for the backend where it fits. With the size announced,
 * which frame is the final one is known from the start: a frame is sealed as soon as it is whole.
 * Without it, a whole frame is held until the next byte (or finish) tells whether it is the final
 * one. The wrapped data key is recorded before the inner writer finishes (a visible copy always has
 * its key) and removed again when the copy is not the one kept.
 */
class EncryptingWriter implements ObjectWriter {
  readonly #inner: ObjectWriter;
  readonly #keys: DataKeyIndex;
  readonly #row: DataKeyRow;
  readonly #cipher: FrameCipher;
  /** The data key of the copy a replace overwrites: removed once the new copy is in place. */
  readonly #previous: string | null;
  readonly #frameSize: number;
  /** The announced plaintext size, or null (then frames are held: see the class comment). */
  readonly #expected: number | null;
  /** With the size announced, the index of the final frame; else -1. */
  readonly #finalIndex: number;
  /** The frame being filled and a frame's sealed bytes where they do not fit the block at hand; how full the frame is. */
  readonly #scratch = { frame: new Scratch(), sealed: new Scratch() };
  #fill = 0;
  #index = 0;
  #size = 0;
  #failed: unknown = null;
  #ready = true;
  #waiting = false;
  readonly #drains: (() => void)[] = [];
  readonly #out = new ChunkGatherer(directBuffers, (buf, len) => {
    this.#ready = this.#inner.write(buf.subarray(0, len), () => directBuffers.giveView(buf));
  });

  constructor(inner: ObjectWriter, oid: Oid, ring: KeyRing, keys: DataKeyIndex, previous: string | null, frameSize: number, expected: number | null) {
    this.#inner = inner;
    this.#keys = keys;
    this.#previous = previous;
    this.#frameSize = frameSize;
    this.#expected = expected;
    this.#finalIndex = expected === null ? -1 : Math.max(1, Math.ceil(expected / frameSize)) - 1;
    const dataKey = randomBytes(32);
    const dataKeyId = randomBytes(16).toString('hex');
    const { kekId, wrapped } = ring.wrap(dataKey, dataKeyId);
    this.#row = { dataKeyId, kekId, wrapped };
    const header = encodeHeader(frameSize, dataKeyId);
    this.#cipher = new FrameCipher(dataKey, header, oidBytes(oid));
    dataKey.fill(0);
    inner.onDrain(() => {
      this.#ready = true;
      if (!this.#waiting) return;
      this.#waiting = false;
      for (const l of this.#drains) l();
    });
    this.#out.add(header);
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    try {
      if (this.#failed !== null) throw this.#failed;
      if (this.#expected !== null && this.#size + chunk.byteLength > this.#expected) throw sizeMismatch(this.#expected, this.#size + chunk.byteLength);
      this.#take(chunk);
      this.#size += chunk.byteLength;
    } catch (e) {
      this.#failed ??= e;
      throw e;
    } finally {
      release?.();
    }
    if (!this.#ready) this.#waiting = true;
    return this.#ready;
  }

  #take(chunk: Uint8Array): void {
    const F = this.#frameSize;
    const known = this.#expected !== null;
    for (let off = 0; off < chunk.byteLength; ) {
      // A held whole frame (size unknown) is not the final one: a byte follows it.
      if (this.#fill === F) this.#seal(this.#scratch.frame.take(F), false);
      const left = chunk.byteLength - off;
      // A whole frame in the chunk, known not to be the final one or known to be: sealed where it lies.
      if (this.#fill === 0 && (known ? left >= F : left > F)) {
        this.#seal(chunk.subarray(off, off + F), this.#index === this.#finalIndex);
        off += F;
        continue;
      }
      const frame = this.#scratch.frame.take(F);
      const n = Math.min(left, F - this.#fill);
      copyBytes(frame, this.#fill, chunk.subarray(off, off + n));
      this.#fill += n;
      off += n;
      if (this.#fill === F && known) this.#seal(frame, this.#index === this.#finalIndex);
    }
  }

  /** Seals frame #index from `plain` and passes it on; the frame at hand is empty again. */
  #seal(plain: Uint8Array, final: boolean): void {
    const length = plain.byteLength + TAG_SIZE;
    const into = this.#out.reserve(length);
    if (into !== null) {
      this.#cipher.sealInto(this.#index, final, plain, into);
      this.#out.commit(length);
    } else {
      const sealed = this.#scratch.sealed.take(this.#frameSize + TAG_SIZE).subarray(0, length);
      this.#cipher.sealInto(this.#index, final, plain, sealed);
      this.#out.add(sealed);
    }
    this.#index++;
    this.#fill = 0;
  }

  onDrain(listener: () => void): void {
    this.#drains.push(listener);
  }

  async finish(): Promise<PutResult> {
    if (this.#failed !== null) throw this.#failed;
    if (this.#expected !== null && this.#size !== this.#expected) throw (this.#failed = sizeMismatch(this.#expected, this.#size));
    // The final frame is still open unless the size was announced and it was whole (an empty object: not begun yet).
    if (this.#expected === null || this.#index === this.#finalIndex) this.#seal(this.#fill === 0 ? Buffer.alloc(0) : this.#scratch.frame.take(this.#frameSize).subarray(0, this.#fill), true);
    this.#out.flush();
    this.#releaseScratch();
    await this.#keys.putDataKey(this.#row);
    let r: PutResult;
    try {
      r = await this.#inner.finish();
    } catch (e) {
      await this.#keys.deleteDataKey(this.#row.dataKeyId).catch(() => undefined);
      throw e;
    }
    // Not kept (the store held a copy already): its key goes. Replaced: the old copy's key goes.
    if (!r.created) await this.#keys.deleteDataKey(this.#row.dataKeyId);
    else if (this.#previous !== null) await this.#keys.deleteDataKey(this.#previous);
    return { size: this.#size, storedSize: r.storedSize, created: r.created };
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
    this.#out.discard();
    this.#releaseScratch();
    await this.#inner.abort();
  }

  /** The frame buffers go back to the pool: every frame is sealed and copied on, or the write is over. */
  #releaseScratch(): void {
    this.#scratch.frame.release();
    this.#scratch.sealed.release();
  }
}

function sizeMismatch(expected: number, got: number): Error {
  return lfsError('LFS_ERR_SIZE_MISMATCH', `Object size does not match: ${expected} bytes announced, ${got} received`);
}

/**
 * A plain write (encryption off, or no key ring): bytes pass through as they are, but an object
 * whose first bytes would read as an encrypted header is refused (it could not be read back as
 * itself); such content is stored only with encryption on.
 */
class PlainWriter implements ObjectWriter {
  readonly #inner: ObjectWriter;
  /** The first MAGIC.length bytes, until they are all seen; then null. */
  #head: Buffer | null = Buffer.alloc(0);

  constructor(inner: ObjectWriter) {
    this.#inner = inner;
  }

  write(chunk: Uint8Array, release?: () => void): boolean {
    if (this.#head !== null) {
      this.#head = Buffer.concat([this.#head, chunk.subarray(0, MAGIC.length - this.#head.byteLength)]);
      if (this.#head.byteLength === MAGIC.length) {
        const head = this.#head;
        this.#head = null;
        if (looksEncrypted(head, Infinity)) {
          release?.();
          throw lfsError('LFS_ERR_BAD_REQUEST', 'The object begins with the encrypted-object marker; it can be stored only with encryption on (SVC_ENCRYPTION=on)');
        }
      }
    }
    return this.#inner.write(chunk, release);
  }

  onDrain(listener: () => void): void {
    this.#inner.onDrain(listener);
  }

  finish(): Promise<PutResult> {
    return this.#inner.finish();
  }

  abort(): Promise<void> {
    return this.#inner.abort();
  }
}

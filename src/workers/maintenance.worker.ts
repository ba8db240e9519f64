/**
 * Whole-file work of the maintenance jobs (issue 6), run on the Piscina pool so the HTTP thread
 * never hashes or compresses a whole object: reading an object back and hashing it (audit, dedupe)
 * and re-encoding a plain object into the framed form (compress). Each task opens the file by path
 * and reads it with synchronous positioned reads: this is a worker thread, blocking it is the point.
 */
import { createHash } from 'node:crypto';
import { setPriority } from 'node:os';
import { closeSync, fdatasyncSync, fstatSync, openSync, readSync, unlinkSync } from 'node:fs';
import { blake3 } from '@napi-rs/blake-hash';
import zstd from 'zstd-napi/binding.js';
import { FRAME_SIZE } from '../format/frame-format.js';
import { MIN_FRAME_SAVING, samplesShrink } from '../format/frame-sample.js';
import { Codec, INDEX_ENTRY_SIZE, TRAILER_SIZE, decodeIndex, decodeTrailer, encodeIndex, encodeTrailer, frameLength, type FrameEntry, type FrameIndex } from '../format/frame-format.js';
import { writeFullySync } from '../util/write-fully.js';
import { reportBytes } from './byte-meter.js';

// Maintenance yields the CPU to requests and uploads: on Linux the nice value is per thread, so this
// lowers only this worker thread (see WorkerTasks). Where it is not allowed the thread runs as is.
try {
  setPriority(0, 10);
} catch {
  // not permitted here
}

/** Plain files are read in chunks of this size. */
const READ_CHUNK = 4 << 20;

let cctx: zstd.CCtx | null = null;
let dctx: zstd.DCtx | null = null;
let plainBuf: Buffer | null = null;
let storedBuf: Buffer | null = null;
let outBuf: Buffer | null = null;

export interface HashFileTask {
  readonly path: string;
  /** Treat the file as plain even if it ends like a framed one (legacy files from other servers). */
  readonly plainOnly?: boolean;
  /** A ByteMeter's buffer: the logical bytes read so far are stored there after every chunk. */
  readonly meter?: SharedArrayBuffer;
}

/**
 * The outcome of reading one object back. `unreadable` means a download would fail (file missing,
 * I/O error, a damaged frame); `ok` carries the digest of the logical bytes, which the caller
 * compares with the oid (a mismatch is "read but does not match").
 */
export interface HashFileResult {
  readonly outcome: 'ok' | 'missing' | 'unreadable';
  readonly sha256: string | null;
  /** Logical bytes (what a download would send). */
  readonly size: number;
  /** Bytes on disk. */
  readonly storedSize: number;
  readonly framed: boolean;
  readonly detail: string | null;
}

function readExactly(fd: number, buf: Buffer, length: number, position: number): void {
  let at = 0;
  while (at < length) {
    const n = readSync(fd, buf, at, length - at, position + at);
    if (n === 0) throw new Error(`short read at ${position + at} (file truncated?)`);
    at += n;
  }
}

/** The frame index when the file is framed (same detection as DiskBlobStore.open), else null. */
function frameIndexOf(fd: number, fileSize: number): FrameIndex | null {
  if (fileSize < TRAILER_SIZE) return null;
  const t = Buffer.alloc(TRAILER_SIZE);
  readExactly(fd, t, TRAILER_SIZE, fileSize - TRAILER_SIZE);
  const trailer = decodeTrailer(t, fileSize);
  if (trailer === null) return null;
  const index = Buffer.alloc(trailer.frameCount * INDEX_ENTRY_SIZE);
  readExactly(fd, index, index.length, trailer.indexOffset);
  return decodeIndex(index, trailer);
}

/**
 * Reads an object back the way a download does (framed files: BLAKE3 of each stored frame, then
 * zstd; plain files: the bytes as stored) and hashes the logical bytes with sha256.
 */
export function hashFile(task: HashFileTask): HashFileResult {
  let fd: number;
  try {
    fd = openSync(task.path, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { outcome: code === 'ENOENT' ? 'missing' : 'unreadable', sha256: null, size: 0, storedSize: 0, framed: false, detail: String(e) };
  }
  let storedSize = 0;
  let framed = false;
  try {
    storedSize = fstatSync(fd).size;
    const index = task.plainOnly ? null : frameIndexOf(fd, storedSize);
    const h = createHash('sha256');
    if (index === null) {
      plainBuf ??= Buffer.allocUnsafe(READ_CHUNK);
      for (let pos = 0; pos < storedSize; ) {
        const n = Math.min(READ_CHUNK, storedSize - pos);
        readExactly(fd, plainBuf, n, pos);
        h.update(plainBuf.subarray(0, n));
        pos += n;
        reportBytes(task.meter, pos);
      }
      return { outcome: 'ok', sha256: h.digest('hex'), size: storedSize, storedSize, framed: false, detail: null };
    }
    framed = true;
    let logical = 0;
    // Sized by the object's own frame size: objects written with another FRAME_SIZE stay readable.
    if (storedBuf === null || storedBuf.length < zstd.compressBound(index.frameSize)) storedBuf = Buffer.allocUnsafe(zstd.compressBound(index.frameSize));
    if (outBuf === null || outBuf.length < index.frameSize) outBuf = Buffer.allocUnsafe(index.frameSize);
    for (let i = 0; i < index.frames.length; i++) {
      const entry = index.frames[i]!;
      const length = frameLength(index, i);
      if (entry.storedLength > storedBuf.length || length > outBuf.length) throw new Error(`frame ${i} is larger than a frame can be`);
      const stored = storedBuf.subarray(0, entry.storedLength);
      readExactly(fd, storedBuf, entry.storedLength, index.offsets[i]!);
      if (!blake3(stored).equals(Buffer.from(entry.digest))) throw new Error(`stored frame ${i} does not match its BLAKE3 digest`);
      if (entry.codec === Codec.Raw) {
        if (entry.storedLength !== length) throw new Error(`raw frame ${i} has the wrong length`);
        h.update(stored);
      } else {
        dctx ??= new zstd.DCtx();
        const n = dctx.decompress(outBuf, stored);
        if (n !== length) throw new Error(`frame ${i} decompressed to ${n} bytes, not ${length}`);
        h.update(outBuf.subarray(0, n));
      }
      logical += length;
      reportBytes(task.meter, logical);
    }
    return { outcome: 'ok', sha256: h.digest('hex'), size: index.logicalSize, storedSize, framed: true, detail: null };
  } catch (e) {
    return { outcome: 'unreadable', sha256: null, size: 0, storedSize, framed, detail: (e as Error).message };
  } finally {
    closeSync(fd);
  }
}

export interface CopyFileTask {
  /** A file of another server's content folder (import): read, never written. */
  readonly path: string;
  /** A new file in the jobs' staging folder to copy it to. */
  readonly outPath: string;
}

/**
 * `ok` carries the sha256 of the bytes copied; `missing` and `unreadable` are about the source;
 * `write_failed` is about the store (its `code`, such as ENOSPC, says why) and fails the job.
 * On anything but `ok` the copy is removed.
 */
export interface CopyFileResult {
  readonly outcome: 'ok' | 'missing' | 'unreadable' | 'write_failed';
  readonly sha256: string | null;
  readonly size: number;
  readonly code: string | null;
  readonly detail: string | null;
}

/**
 * Copies a file into the store's staging folder, hashing the bytes as they are written, and
 * fsyncs the copy: the digest the caller checks is that of the very bytes stored, whatever the
 * source does meanwhile. Reads until end of file in chunks, so memory stays one chunk.
 */
export function copyFile(task: CopyFileTask): CopyFileResult {
  let fd: number;
  try {
    fd = openSync(task.path, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? null;
    return { outcome: code === 'ENOENT' ? 'missing' : 'unreadable', sha256: null, size: 0, code, detail: String(e) };
  }
  let out: number | null = null;
  let side: 'read' | 'write' = 'write';
  try {
    out = openSync(task.outPath, 'wx', 0o644);
    plainBuf ??= Buffer.allocUnsafe(READ_CHUNK);
    const h = createHash('sha256');
    let pos = 0;
    for (;;) {
      side = 'read';
      const n = readSync(fd, plainBuf, 0, READ_CHUNK, pos);
      if (n === 0) break;
      h.update(plainBuf.subarray(0, n));
      side = 'write';
      writeFullySync(out, plainBuf.subarray(0, n), pos);
      pos += n;
    }
    side = 'write';
    fdatasyncSync(out);
    closeSync(out);
    out = null;
    return { outcome: 'ok', sha256: h.digest('hex'), size: pos, code: null, detail: null };
  } catch (e) {
    if (out !== null) {
      closeSync(out);
      out = null;
      try {
        unlinkSync(task.outPath);
      } catch {
        // never created
      }
    }
    const err = e as NodeJS.ErrnoException;
    return { outcome: side === 'read' ? 'unreadable' : 'write_failed', sha256: null, size: 0, code: err.code ?? null, detail: err.message };
  } finally {
    closeSync(fd);
  }
}

export interface CompressFileTask {
  /** A plain object file. */
  readonly path: string;
  /** Where to write the framed form (a new file), or null for a dry run that only measures. */
  readonly outPath: string | null;
  readonly level: number;
  /** A ByteMeter's buffer: the plain bytes read so far are stored there after every frame. */
  readonly meter?: SharedArrayBuffer;
}

export interface CompressFileResult {
  /** 'framed' is written (or would be); 'not_smaller' means framing saves nothing; 'already_framed' is left as is. */
  readonly outcome: 'framed' | 'not_smaller' | 'already_framed' | 'missing' | 'unreadable';
  readonly sha256: string | null;
  readonly size: number;
  /** Size of the framed form (equal to size when not smaller). */
  readonly framedSize: number;
  readonly detail: string | null;
}

/**
 * Re-encodes a plain file into the framed format of frame-format.ts, hashing the plain bytes with
 * sha256 as they are read so the caller can check the digest before the new file replaces the old.
 * The framed file is fsync'd before this returns; when it is not smaller it is removed again.
 */
export function compressFile(task: CompressFileTask): CompressFileResult {
  let fd: number;
  try {
    fd = openSync(task.path, 'r');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { outcome: code === 'ENOENT' ? 'missing' : 'unreadable', sha256: null, size: 0, framedSize: 0, detail: String(e) };
  }
  let out: number | null = null;
  try {
    const size = fstatSync(fd).size;
    if (frameIndexOf(fd, size) !== null) return { outcome: 'already_framed', sha256: null, size, framedSize: size, detail: null };
    if (task.outPath !== null) out = openSync(task.outPath, 'wx', 0o644);
    cctx ??= new zstd.CCtx();
    plainBuf ??= Buffer.allocUnsafe(READ_CHUNK);
    storedBuf ??= Buffer.allocUnsafe(zstd.compressBound(FRAME_SIZE));
    const h = createHash('sha256');
    const entries: FrameEntry[] = [];
    let position = 0;
    // Frames are judged as uploads judge them (frame-sample.ts): incompressible media costs a few
    // samples per frame instead of a full try; while frames keep compressing, no samples.
    let compressing = false;
    for (let pos = 0; pos < size; pos += FRAME_SIZE) {
      const n = Math.min(FRAME_SIZE, size - pos);
      readExactly(fd, plainBuf, n, pos);
      const plain = plainBuf.subarray(0, n);
      h.update(plain);
      let stored: Buffer = plain;
      let codec = Codec.Raw;
      if (compressing || samplesShrink(plain)) {
        const c = cctx.compress(storedBuf, plain, task.level);
        if (c <= n * (1 - MIN_FRAME_SAVING)) {
          stored = storedBuf.subarray(0, c);
          codec = Codec.Zstd;
        }
        compressing = codec === Codec.Zstd;
      }
      if (out !== null) writeFullySync(out, stored, position);
      entries.push({ storedLength: stored.length, codec, digest: new Uint8Array(blake3(stored)) });
      position += stored.length;
      reportBytes(task.meter, pos + n);
    }
    const index = encodeIndex(entries);
    const framedSize = position + index.length + TRAILER_SIZE;
    const sha256 = h.digest('hex');
    if (framedSize >= size) {
      if (out !== null) {
        closeSync(out);
        out = null;
        unlinkSync(task.outPath!);
      }
      return { outcome: 'not_smaller', sha256, size, framedSize: size, detail: null };
    }
    if (out !== null) {
      writeFullySync(out, Buffer.concat([index, encodeTrailer(FRAME_SIZE, size, entries.length, position, index)]), position);
      fdatasyncSync(out);
    }
    return { outcome: 'framed', sha256, size, framedSize, detail: null };
  } catch (e) {
    if (out !== null) {
      closeSync(out);
      out = null;
      try {
        unlinkSync(task.outPath!);
      } catch {
        // already gone
      }
    }
    return { outcome: 'unreadable', sha256: null, size: 0, framedSize: 0, detail: (e as Error).message };
  } finally {
    if (out !== null) closeSync(out);
    closeSync(fd);
  }
}

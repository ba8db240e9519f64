import { createHash } from 'node:crypto';
import type { Hasher } from '../../format/frame-codec.js';
import type { BlobReader, ObjectWriter, PutResult } from '../../store/types.js';

/** Pulls the next chunk (valid until the next pull), null at the end. */
export type Pull = () => Promise<Uint8Array | null>;

/** Objects up to this size are hashed on the calling thread: cheaper than a round trip to the hasher. */
const INLINE_MAX = 1 << 20;
/** Shared blocks handed to the hasher, and how many one object may have there at once. */
const BLOCK = 1 << 20;
const DEPTH = 4;
const KEEP = 32;
const idle: Buffer[] = [];

/** sha256 of what `pull` yields; large objects hashed off this thread in shared blocks, at most DEPTH per object, so memory stays bounded. */
export async function digestOf(pull: Pull, size: number, hasher: Hasher, onBytes: (n: number) => void): Promise<{ sha256: string; size: number }> {
  let count = 0;
  if (size <= INLINE_MAX) {
    const h = createHash('sha256');
    for (let c = await pull(); c !== null; c = await pull()) {
      h.update(c);
      onBytes((count += c.byteLength));
    }
    return { sha256: h.digest('hex'), size: count };
  }
  const stream = hasher.open();
  let inFlight = 0;
  let freed: (() => void) | null = null;
  let block: Buffer | null = null;
  let fill = 0;
  const send = (): void => {
    const b = block!;
    const n = fill;
    block = null;
    fill = 0;
    inFlight++;
    stream.update(b.subarray(0, n), () => {
      if (idle.length < KEEP) idle.push(b);
      inFlight--;
      const f = freed;
      freed = null;
      f?.();
    });
  };
  try {
    for (let c = await pull(); c !== null; c = await pull()) {
      for (let off = 0; off < c.byteLength; ) {
        if (block === null) {
          while (inFlight >= DEPTH) await new Promise<void>((resolve) => (freed = resolve));
          block = idle.pop() ?? Buffer.from(new SharedArrayBuffer(BLOCK));
        }
        const n = Math.min(c.byteLength - off, BLOCK - fill);
        // fill() is one native memcpy into shared memory (set() takes V8's element-wise path there).
        block.fill(c.subarray(off, off + n), fill, fill + n);
        fill += n;
        off += n;
        if (fill === BLOCK) send();
      }
      onBytes((count += c.byteLength));
    }
    if (fill > 0) send();
    return { sha256: await stream.digest(), size: count };
  } catch (e) {
    stream.drop();
    throw e;
  } finally {
    if (block !== null && idle.length < KEEP) idle.push(block);
  }
}

export async function withObjectPull<T>(reader: BlobReader, use: (pull: Pull) => Promise<T>): Promise<T> {
  if (reader.size === 0) return use(async () => null);
  const src = reader.read(0, reader.size - 1);
  try {
    return await use(() => src.next());
  } finally {
    await src.close();
  }
}

/** Streams what `pull` yields into `writer` with backpressure, then finishes it (aborts on failure); the writer copies each chunk, valid only until the next pull. */
export async function pumpInto(pull: Pull, writer: ObjectWriter, onBytes: (n: number) => void): Promise<PutResult> {
  let drained: (() => void) | null = null;
  writer.onDrain(() => {
    const d = drained;
    drained = null;
    d?.();
  });
  let count = 0;
  try {
    for (let c = await pull(); c !== null; c = await pull()) {
      const more = writer.write(c);
      onBytes((count += c.byteLength));
      if (!more) await new Promise<void>((resolve) => (drained = resolve));
    }
    return await writer.finish();
  } catch (e) {
    await writer.abort();
    throw e;
  }
}

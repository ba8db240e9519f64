import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, createReadStream, createWriteStream, openSync, readSync, writeSync } from 'node:fs';

/** Text-like bytes (an OBJ-ish vertex list): compressible, but every line differs; `seed` varies them. */
export function textLike(size: number, seed = 0): Buffer {
  const out = Buffer.alloc(size);
  let at = 0;
  for (let i = 0; at < size; i++) at += out.write(`v ${seed} ${i * 0.5} ${i % 977} // vertex ${i}\n`, at);
  return out;
}

/** sha256 of a file, streamed. */
export async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 4 << 20 })) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** Writes `size` pseudo-random bytes without holding them in memory; returns the sha256. */
export async function writeRandomFile(path: string, size: number): Promise<string> {
  const out = createWriteStream(path);
  const h = createHash('sha256');
  const block = randomBytes(4 << 20);
  let written = 0;
  let counter = 0;
  while (written < size) {
    block.writeUInt32LE(counter++, 0); // every block differs, so nothing dedupes or compresses trivially
    const n = Math.min(block.length, size - written);
    const chunk = Buffer.from(block.subarray(0, n));
    h.update(chunk);
    if (!out.write(chunk)) await once(out, 'drain');
    written += n;
  }
  out.end();
  await once(out, 'finish');
  return h.digest('hex');
}

/** Everything a chunk source yields, copied out as it comes (a chunk is valid until the next call); the source is closed. */
export async function drainChunks(source: { next(): Promise<Uint8Array | null>; close(): Promise<void> }): Promise<Buffer> {
  const parts: Buffer[] = [];
  try {
    for (let c = await source.next(); c !== null; c = await source.next()) parts.push(Buffer.from(c));
  } finally {
    await source.close();
  }
  return Buffer.concat(parts);
}

/** Flips the bits `mask` of the byte at `at` of a file in place (a stored copy damaged on disk). */
export function flipByte(path: string, at: number, mask = 0x40): void {
  const fd = openSync(path, 'r+');
  try {
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, at);
    b[0] = b[0]! ^ mask;
    writeSync(fd, b, 0, 1, at);
  } finally {
    closeSync(fd);
  }
}

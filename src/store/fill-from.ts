import type { ChunkSource } from './types.js';

/**
 * Fills `into` from a chunk source and closes it: a positioned read (BlobReader.readAt) made of a
 * ranged read, where the backend cannot read straight into the caller's buffer. Throws on a short read.
 */
export async function fillFrom(src: ChunkSource, into: Uint8Array): Promise<void> {
  let at = 0;
  try {
    for (let c = await src.next(); c !== null; c = await src.next()) {
      if (at + c.byteLength > into.byteLength) throw new Error(`read past the ${into.byteLength} bytes asked for`);
      into.set(c, at);
      at += c.byteLength;
    }
  } finally {
    await src.close();
  }
  if (at !== into.byteLength) throw new Error(`short read: ${at} of ${into.byteLength} bytes`);
}

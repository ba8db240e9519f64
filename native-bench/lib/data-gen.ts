import { createCipheriv, createHash } from 'node:crypto';

/** One mebibyte, the unit every generator and report uses (MB in rates means 10^6 bytes). */
export const MiB = 1 << 20;
/** One gibibyte. */
export const GiB = 1 << 30;

/**
 * A seeded, fast pseudo-random byte source: the AES-128-CTR keystream of a key derived from the seed.
 * With AES-NI it runs at several GB/s, so generating a 5 GiB object twice (once to hash, once to send)
 * costs far less than the transfer itself, and no RAM beyond one chunk. The bytes are incompressible
 * (zstd finds no matches, unlike a repeated block with a counter, which level 3's 2 MiB window would see).
 */
export class SeededBytes {
  readonly #key: Buffer;

  constructor(seed: string) {
    this.#key = createHash('sha256').update(`stowage-bench:${seed}`).digest().subarray(0, 16);
  }

  /** `size` bytes as chunks of at most `chunk` bytes; the same seed always yields the same bytes. */
  *chunks(size: number, chunk = MiB): Generator<Buffer> {
    const cipher = createCipheriv('aes-128-ctr', this.#key, Buffer.alloc(16));
    const zeros = Buffer.alloc(chunk);
    for (let left = size; left > 0; left -= chunk) {
      yield cipher.update(left >= chunk ? zeros : zeros.subarray(0, left));
    }
  }

  /** The whole `size` bytes in one buffer (for objects that fit comfortably in memory). */
  bytes(size: number): Buffer {
    const out = Buffer.allocUnsafe(size);
    let at = 0;
    for (const c of this.chunks(size)) {
      c.copy(out, at);
      at += c.length;
    }
    return out;
  }

  /** sha256 (hex) of `chunks(size)`, computed by streaming: the first of the two passes. */
  sha256(size: number): string {
    const h = createHash('sha256');
    for (const c of this.chunks(size)) h.update(c);
    return h.digest('hex');
  }
}

/** Small deterministic PRNG (mulberry32) for structured generators; not for bulk bytes. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Mesh-like data as a game or film asset holds it: interleaved float32 vertex records
 * (position xyz, normal xyz, uv) over a smoothly displaced grid with a little noise, followed by a
 * uint32 triangle index buffer. Neighbouring values share exponents and high mantissa bits, which is
 * what zstd can exploit in real meshes; the low mantissa bits stay noisy.
 */
export function meshLike(size: number, seed = 7): Buffer {
  const out = Buffer.alloc(size);
  const rnd = mulberry32(seed);
  const vertexBytes = 32;
  // About 80% vertices, 20% indices, like an indexed triangle mesh.
  const vertexCount = Math.floor((size * 0.8) / vertexBytes);
  const side = Math.max(2, Math.floor(Math.sqrt(vertexCount)));
  const f = new Float32Array(out.buffer, out.byteOffset, Math.floor(vertexCount * 8));
  let v = 0;
  for (let i = 0; i < vertexCount; i++) {
    const gx = i % side;
    const gz = Math.floor(i / side);
    const x = gx * 0.05;
    const z = gz * 0.05;
    const y = Math.sin(x * 0.7) * Math.cos(z * 0.3) * 2 + (rnd() - 0.5) * 0.002;
    const nx = -Math.cos(x * 0.7) * 0.7 * Math.cos(z * 0.3) * 2;
    const nz = Math.sin(x * 0.7) * Math.sin(z * 0.3) * 0.3 * 2;
    const inv = 1 / Math.sqrt(nx * nx + 1 + nz * nz);
    f[v++] = x;
    f[v++] = y;
    f[v++] = z;
    f[v++] = nx * inv;
    f[v++] = inv;
    f[v++] = nz * inv;
    f[v++] = gx / side;
    f[v++] = gz / side;
  }
  // Index buffer: two triangles per grid quad, in scan order.
  let at = vertexCount * vertexBytes;
  at += (4 - (at % 4)) % 4;
  const idx = new Uint32Array(out.buffer, out.byteOffset + at, Math.floor((size - at) / 4));
  let k = 0;
  for (let q = 0; k + 6 <= idx.length; q++) {
    const gx = q % (side - 1);
    const gz = Math.floor(q / (side - 1));
    const a = gz * side + gx;
    idx[k++] = a;
    idx[k++] = a + side;
    idx[k++] = a + 1;
    idx[k++] = a + 1;
    idx[k++] = a + side;
    idx[k++] = a + side + 1;
  }
  return out;
}

const WORDS = (
  'the of and to in is that for it as was with be by on not he this are or his from at which but have an they you ' +
  'were her she there been one all we their has would when if so no will more can out its said up what about into than ' +
  'them only other new some could time these two may then do first any my now such like our over man me even most made ' +
  'after also did many before must through back years where much your way well down should because each just those people ' +
  'vertex shader texture material scene render frame light camera mesh asset level export import layer animation bone ' +
  'weight channel sample buffer index normal tangent color alpha depth stencil width height offset stride format version'
).split(' ');

/**
 * Text-like data: lines of words drawn with a Zipf-like skew from a small vocabulary, with numbers,
 * punctuation and indentation, roughly the entropy of logs, scene descriptions and source code.
 */
export function textLike(size: number, seed = 11): Buffer {
  const rnd = mulberry32(seed);
  const parts: string[] = [];
  let length = 0;
  while (length < size) {
    const indent = ' '.repeat(2 * Math.floor(rnd() * 4));
    const n = 4 + Math.floor(rnd() * 12);
    const words: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = rnd();
      if (r < 0.08) words.push((rnd() * 1000).toFixed(3));
      else words.push(WORDS[Math.floor(Math.pow(rnd(), 2.2) * WORDS.length)]!);
    }
    const line = `${indent}${words.join(rnd() < 0.3 ? ', ' : ' ')}${rnd() < 0.5 ? ';' : '.'}\n`;
    parts.push(line);
    length += line.length;
  }
  return Buffer.from(parts.join(''), 'latin1').subarray(0, size);
}

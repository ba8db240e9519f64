/**
 * sha256 in JavaScript whose state can be saved (node:crypto's cannot), for resumable uploads on the
 * hash thread. The saved state is the addon's format (src/native/sha256.cc), so either goes on from
 * the other's.
 */
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
  0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const INITIAL = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
/** Chaining words and byte count: the part of a saved state before the unfinished block. */
const STATE_HEAD = 40;

export class Sha256State {
  readonly #h = new Uint32Array(INITIAL);
  readonly #w = new Uint32Array(64);
  readonly #block = new Uint8Array(64);
  #blockLength = 0;
  #count = 0;

  /** A sha256 going on from a saved state (throws RangeError on bytes that are not one), or a new one. */
  constructor(saved?: Uint8Array) {
    if (saved === undefined) return;
    const count = saved.length >= STATE_HEAD ? Number(readBig64(saved)) : -1;
    if (saved.length < STATE_HEAD || saved.length > STATE_HEAD + 63 || count % 64 !== saved.length - STATE_HEAD || !Number.isSafeInteger(count)) {
      throw new RangeError('not a saved sha256 state');
    }
    const view = new DataView(saved.buffer, saved.byteOffset, saved.byteLength);
    for (let i = 0; i < 8; i++) this.#h[i] = view.getUint32(4 * i);
    this.#count = count;
    this.#block.set(saved.subarray(STATE_HEAD));
    this.#blockLength = saved.length - STATE_HEAD;
  }

  update(data: Uint8Array): void {
    let at = 0;
    this.#count += data.length;
    if (this.#blockLength > 0) {
      const take = Math.min(64 - this.#blockLength, data.length);
      this.#block.set(data.subarray(0, take), this.#blockLength);
      this.#blockLength += take;
      at = take;
      if (this.#blockLength < 64) return;
      this.#compress(this.#block, 0);
      this.#blockLength = 0;
    }
    for (; at + 64 <= data.length; at += 64) this.#compress(data, at);
    this.#block.set(data.subarray(at));
    this.#blockLength = data.length - at;
  }

  /** The saved state (the addon's format). */
  save(): Uint8Array {
    const out = new Uint8Array(STATE_HEAD + this.#blockLength);
    const view = new DataView(out.buffer);
    for (let i = 0; i < 8; i++) view.setUint32(4 * i, this.#h[i]!);
    view.setBigUint64(32, BigInt(this.#count));
    out.set(this.#block.subarray(0, this.#blockLength), STATE_HEAD);
    return out;
  }

  /** The hex digest; the state is used up. */
  digest(): string {
    const bits = BigInt(this.#count) * 8n;
    const pad = new Uint8Array((this.#blockLength < 56 ? 56 : 120) - this.#blockLength + 8);
    pad[0] = 0x80;
    new DataView(pad.buffer).setBigUint64(pad.length - 8, bits);
    this.update(pad);
    return Array.from(this.#h, (x) => x.toString(16).padStart(8, '0')).join('');
  }

  #compress(data: Uint8Array, at: number): void {
    const w = this.#w;
    for (let i = 0; i < 16; i++, at += 4) w[i] = (data[at]! << 24) | (data[at + 1]! << 16) | (data[at + 2]! << 8) | data[at + 3]!;
    for (let i = 16; i < 64; i++) {
      const a = w[i - 15]!;
      const b = w[i - 2]!;
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      w[i] = (w[i - 16]! + s0 + w[i - 7]! + s1) | 0;
    }
    const h = this.#h;
    let a = h[0]!, b = h[1]!, c = h[2]!, d = h[3]!, e = h[4]!, f = h[5]!, g = h[6]!, k = h[7]!;
    for (let i = 0; i < 64; i++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const t1 = (k + S1 + ((e & f) ^ (~e & g)) + K[i]! + w[i]!) | 0;
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      k = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] = (h[0]! + a) | 0;
    h[1] = (h[1]! + b) | 0;
    h[2] = (h[2]! + c) | 0;
    h[3] = (h[3]! + d) | 0;
    h[4] = (h[4]! + e) | 0;
    h[5] = (h[5]! + f) | 0;
    h[6] = (h[6]! + g) | 0;
    h[7] = (h[7]! + k) | 0;
  }
}

/** Whether `saved` is a saved sha256 state after exactly `count` bytes. */
export function isSavedStateOf(saved: Uint8Array, count: number): boolean {
  return saved.length >= STATE_HEAD && saved.length === STATE_HEAD + (count % 64) && readBig64(saved) === BigInt(count);
}

function readBig64(saved: Uint8Array): bigint {
  return new DataView(saved.buffer, saved.byteOffset, saved.byteLength).getBigUint64(32);
}

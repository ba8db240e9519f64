import { createCipheriv, randomBytes, randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { chooseFrameCipher, frameGcm, frameGcmMissing, nodeFrameGcm, type FrameGcm } from '../../../src/crypto/frame-gcm.js';

// The build (npm test runs build-native with --require) compiles the addon: the test is about it.
const addon = frameGcm();
t.equal(frameGcmMissing(), '', 'the frame cipher addon loaded');
t.not(addon, nodeFrameGcm, 'the addon, not the fallback, is the frame cipher');

// The vector AES-GCM runs wherever the CPU has it, so this test checks it rather than OpenSSL's: its
// 512-bit loop where the CPU has AVX-512, and (below) its 256-bit one in a child told to use it.
const flags = new Set(/^flags\s*:(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1]?.trim().split(/\s+/) ?? []);
const has = (...f: string[]): boolean => process.arch === 'x64' && f.every((x) => flags.has(x));
const narrowed = process.env.STOWAGE_GCM_WIDTH === '256';
const engine = !has('aes', 'pclmulqdq', 'avx2', 'vaes', 'vpclmulqdq') ? 'openssl' : has('avx512f', 'avx512bw', 'avx512vl') && !narrowed ? 'vaes-avx512' : 'vaes-avx2';
t.equal(addon.engine, engine, "the addon's engine on this CPU");
if (engine === 'vaes-avx512') {
  t.spawn(process.execPath, [fileURLToPath(import.meta.url)], { env: { ...process.env, STOWAGE_GCM_WIDTH: '256' } }, 'the same checks on the 256-bit loop');
}

const key = randomBytes(32);
const nonce = randomBytes(12);
const aad = randomBytes(89);

/** node:crypto's AES-256-GCM of `plain` in one go: the reference both implementations must match. */
function reference(plain: Uint8Array): Buffer {
  const c = createCipheriv('aes-256-gcm', key, nonce);
  c.setAAD(aad);
  return Buffer.concat([c.update(plain), c.final(), c.getAuthTag()]);
}

const impls: [string, FrameGcm][] = [
  ['addon', addon],
  ['node:crypto', nodeFrameGcm],
];
const sizes = [0, 1, 15, 16, 17, 4096, 65_536 + 7, 256 << 10];

for (const [name, gcm] of impls) {
  t.test(`${name}: seal writes AES-256-GCM's bytes, open reads them back, apart and in place`, async (t) => {
    for (const size of sizes) {
      const plain = randomBytes(size);
      const want = reference(plain);
      const out = Buffer.alloc(size + 16, 0xee);
      gcm.seal(key, nonce, aad, plain, out);
      t.ok(out.equals(want), `sealed ${size} bytes`);

      const inPlace = Buffer.alloc(size + 16);
      plain.copy(inPlace);
      gcm.seal(key, nonce, aad, inPlace.subarray(0, size), inPlace);
      t.ok(inPlace.equals(want), `sealed ${size} bytes in place`);

      const back = Buffer.alloc(size, 0xee);
      t.equal(gcm.open(key, nonce, aad, want, back), true, `opened ${size} bytes`);
      t.ok(back.equals(plain), `${size} bytes back`);

      const stored = Buffer.from(want);
      t.equal(gcm.open(key, nonce, aad, stored, stored.subarray(0, size)), true, `opened ${size} bytes in place`);
      t.ok(stored.subarray(0, size).equals(plain), `${size} bytes back in place`);
    }
  });

  t.test(`${name}: nothing that was changed opens, and nothing of it is left in the output`, async (t) => {
    const plain = randomBytes(70_000);
    const sealed = reference(plain);
    const cases: [string, (b: Buffer) => Buffer, Uint8Array, Uint8Array][] = [
      ['a flipped ciphertext byte', (b) => flip(b, 12_345), nonce, aad],
      ['a flipped tag byte', (b) => flip(b, b.byteLength - 1), nonce, aad],
      ['another nonce', (b) => b, flip(Buffer.from(nonce), 11), aad],
      ['another AAD', (b) => b, nonce, flip(Buffer.from(aad), 88)],
    ];
    for (const [what, change, n, a] of cases) {
      const out = Buffer.alloc(plain.byteLength, 0xee);
      t.equal(gcm.open(key, n, a, change(Buffer.from(sealed)), out), false, what);
      t.ok(out.equals(Buffer.alloc(plain.byteLength)), `${what}: the output is zeroed`);
    }
    const truncated = sealed.subarray(0, sealed.byteLength - 1);
    t.equal(gcm.open(key, nonce, aad, truncated, Buffer.alloc(truncated.byteLength - 16)), false, 'a frame one byte short');
  });
}

t.test('the addon matches node:crypto byte for byte at every length, every AAD length, in place or apart', async (t) => {
  // Every length up to 600 (each tail of the 256-byte wide loop, twice over), then around the
  // loop's and the frames' edges; a fresh key, nonce and AAD each, so nothing lines up by chance.
  const lengths = [...Array.from({ length: 601 }, (_, i) => i), 4095, 4096, 4097, 65_535, 65_536 + 17, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (1 << 20) + 5];
  let mismatches = 0;
  let forged = 0;
  for (const length of lengths) {
    const k = randomBytes(32);
    const n = randomBytes(12);
    const a = randomBytes(randomInt(0, 201));
    const plain = randomBytes(length);
    const c = createCipheriv('aes-256-gcm', k, n);
    c.setAAD(a);
    const want = Buffer.concat([c.update(plain), c.final(), c.getAuthTag()]);
    const sealed = Buffer.alloc(length + 16, 0xee);
    addon.seal(k, n, a, plain, sealed);
    const inPlace = Buffer.concat([plain, Buffer.alloc(16)]);
    addon.seal(k, n, a, inPlace.subarray(0, length), inPlace);
    const back = Buffer.alloc(length, 0xee);
    const opened = addon.open(k, n, a, want, back);
    const stored = Buffer.from(want);
    const openedInPlace = addon.open(k, n, a, stored, stored.subarray(0, length));
    if (!sealed.equals(want) || !inPlace.equals(want) || !opened || !back.equals(plain) || !openedInPlace || !stored.subarray(0, length).equals(plain)) mismatches++;
    // One bit flipped anywhere in the ciphertext and tag, or in the AAD: refused, the output zeroed.
    const at = randomInt(0, length + 16);
    const out = Buffer.alloc(length, 0xee);
    if (addon.open(k, n, a, flip(Buffer.from(want), at), out) || !out.equals(Buffer.alloc(length))) forged++;
    if (a.byteLength > 0 && addon.open(k, n, flip(Buffer.from(a), randomInt(0, a.byteLength)), want, out)) forged++;
  }
  t.equal(mismatches, 0, `${lengths.length} lengths sealed and opened as node:crypto does`);
  t.equal(forged, 0, 'no changed frame or AAD opened');
});

t.test('the addon refuses what is not a frame call, and throws rather than write out of bounds', async (t) => {
  const plain = randomBytes(1000);
  const cases: [string, () => unknown][] = [
    ['a short key', () => addon.seal(key.subarray(0, 16), nonce, aad, plain, Buffer.alloc(1016))],
    ['a long nonce', () => addon.seal(key, Buffer.alloc(16), aad, plain, Buffer.alloc(1016))],
    ['an output one byte short', () => addon.seal(key, nonce, aad, plain, Buffer.alloc(1015))],
    ['an output one byte long', () => addon.open(key, nonce, aad, Buffer.alloc(1016), Buffer.alloc(1001))],
    ['stored shorter than a tag', () => addon.open(key, nonce, aad, Buffer.alloc(15), Buffer.alloc(0))],
    ['a string for bytes', () => addon.seal(key, nonce, aad, 'x' as unknown as Uint8Array, Buffer.alloc(17))],
    ['a Uint16Array', () => addon.seal(key, nonce, aad, new Uint16Array(8) as unknown as Uint8Array, Buffer.alloc(32))],
    ['too few arguments', () => (addon.seal as (...a: unknown[]) => void)(key, nonce, aad, plain)],
  ];
  for (const [what, call] of cases) t.throws(call, { code: 'ERR_FRAME_CIPHER' }, what);
  const shared = Buffer.alloc(2000);
  t.throws(() => addon.seal(key, nonce, aad, shared.subarray(0, 1000), shared.subarray(8, 1024)), { code: 'ERR_FRAME_CIPHER' }, 'an output starting inside the input');
  t.throws(() => addon.seal(key, nonce, aad, shared.subarray(1000, 1992), shared.subarray(0, 1008)), { code: 'ERR_FRAME_CIPHER' }, 'an output whose tag would land on the input');
  t.throws(() => addon.open(key, nonce, aad, shared.subarray(0, 1016), shared.subarray(1, 1001)), { code: 'ERR_FRAME_CIPHER' }, 'an open one byte off in place');
});

function flip<T extends Uint8Array>(b: T, at: number): T {
  b[at] ^= 0x01;
  return b;
}

t.test('SVC_ENCRYPTION_CIPHER=openssl: OpenSSL seals and opens from then on, the same bytes', async (t) => {
  const plain = randomBytes(70_000);
  const want = reference(plain);
  chooseFrameCipher('auto');
  t.equal(addon.engine, engine, 'auto keeps the engine the CPU allows');
  chooseFrameCipher('openssl');
  t.equal(addon.engine, 'openssl', 'openssl asked for: OpenSSL');
  const sealed = Buffer.alloc(plain.byteLength + 16);
  addon.seal(key, nonce, aad, plain, sealed);
  t.ok(sealed.equals(want), 'sealed as before');
  const back = Buffer.alloc(plain.byteLength);
  t.equal(addon.open(key, nonce, aad, want, back), true, 'opened');
  t.ok(back.equals(plain), 'the same bytes back');
});

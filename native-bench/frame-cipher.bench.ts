/**
 * The frame cipher's own speed: 1 GiB sealed and opened in 256 KiB frames through the addon, on one
 * thread, medians of 5 rounds. The engine is what the server would use on this CPU
 * (STOWAGE_GCM_WIDTH=256 for the 256-bit loop); OpenSSL's own figure beside it:
 * `openssl speed -evp aes-256-gcm -bytes 262144`.
 *
 *   npm run bench:build && node native-bench/dist/frame-cipher.bench.js
 */
import { randomBytes } from 'node:crypto';
import { fromProduct } from './lib/product.js';

const { frameGcm } = await fromProduct<typeof import('../dist/src/crypto/frame-gcm.js')>('src/crypto/frame-gcm.js');

const FRAME = 256 << 10;
const FRAMES = 4096; // 1 GiB
const gcm = frameGcm();
const key = randomBytes(32);
const nonce = randomBytes(12);
const aad = randomBytes(89);
const plain = randomBytes(FRAME);
const sealed = Buffer.alloc(FRAME + 16);
const opened = Buffer.alloc(FRAME);

const seconds = (f: () => void): number => {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < FRAMES; i++) f();
  return Number(process.hrtime.bigint() - t0) / 1e9;
};
const med = (v: number[]): number => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
const seal: number[] = [];
const open: number[] = [];
for (let r = 0; r < 5; r++) {
  seal.push(seconds(() => gcm.seal(key, nonce, aad, plain, sealed)));
  open.push(
    seconds(() => {
      if (!gcm.open(key, nonce, aad, sealed, opened)) throw new Error('a sealed frame did not open');
    }),
  );
}
process.stdout.write(`engine ${gcm.engine}: seal ${med(seal).toFixed(3)} s/GiB, open ${med(open).toFixed(3)} s/GiB (medians of 5 rounds, 256 KiB frames)\n`);

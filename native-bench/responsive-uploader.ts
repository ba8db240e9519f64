/**
 * The load of the responsiveness bench, in a process of its own: streaming a 1 GiB body from the
 * process that also times `/health` would put the upload's writes on the prober's event loop, and
 * the figures would show the prober's delays rather than the server's.
 *
 *   node responsive-uploader.js URL AUTH SIZE_MIB
 * Builds the text-like body, prints `ready`, waits for a line on stdin, PUTs the body to URL/<oid>,
 * then prints `{"ms": N}` (or exits non-zero with the status).
 */
import { createHash } from 'node:crypto';
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { textLike } from './lib/data-gen.js';

const MiB = 1 << 20;
const [base, auth, sizeArg] = process.argv.slice(2);
const sizeMiB = Number(sizeArg);
// textLike builds a string, which cannot reach 1 GiB: join 64 MiB pieces.
const upload = Buffer.concat(Array.from({ length: Math.ceil(sizeMiB / 64) }, (_, i) => textLike(64 * MiB, 500 + i))).subarray(0, sizeMiB * MiB);
const oid = createHash('sha256').update(upload).digest('hex');
process.stdout.write('ready\n');
const lines = createInterface({ input: process.stdin });
await new Promise<void>((resolve) => lines.once('line', () => resolve()));
const t0 = performance.now();
const r = await request(`${base}/${oid}`, {
  method: 'PUT',
  headers: { authorization: auth!, 'x-lfs-object-size': String(upload.length) },
  body: Readable.from((function* () { for (let at = 0; at < upload.length; at += MiB) yield upload.subarray(at, at + MiB); })()),
});
await r.body.text();
if (r.statusCode !== 200) {
  process.stderr.write(`upload ${r.statusCode}\n`);
  process.exit(1);
}
process.stdout.write(`${JSON.stringify({ ms: performance.now() - t0 })}\n`);
lines.close();

import { createHash, randomBytes } from 'node:crypto';
import { openSync, readSync, readdirSync, statSync, writeSync, closeSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, http } from '../helpers/lfs-http.js';
import { startServer, tmpDir, waitForFile } from '../helpers/start-server.js';
import { textLike } from '../helpers/data.js';

const F = 2 << 20; // frame size (FRAME_SIZE)
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok', { login: 'w', repos: { 'acme/game': 'push' } });
const auth = { authorization: basic('tok') };
const dataDir = tmpDir();
let server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd:3' }, { dataDir });
t.teardown(() => server.stop());

const oidOf = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const pathOf = (oid: string): string => join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);

async function put(data: Buffer): Promise<string> {
  const oid = oidOf(data);
  const res = await http('PUT', `${server.url}/acme/game/objects/${oid}`, { headers: auth, body: data });
  if (res.status !== 200) throw new Error(`PUT ${res.status} ${res.body}`);
  return oid;
}
const get = (oid: string, range?: string) => http('GET', `${server.url}/acme/game/objects/${oid}`, { headers: range ? { ...auth, range } : auth });

t.test('round trips across frame boundaries, compressible and not', async (t) => {
  for (const size of [0, 1, 4095, 4096, F - 1, F, F + 1, 3 * F + 12345]) {
    for (const [kind, data] of [['text', textLike(size)], ['random', randomBytes(size)]] as const) {
      const oid = await put(data);
      const back = await get(oid);
      t.equal(back.status, 200, `${kind} ${size}: 200`);
      t.ok(back.body.equals(data), `${kind} ${size}: same bytes`);
      await waitForFile(pathOf(oid)); // objects up to 1 MiB are journaled first
      const stored = statSync(pathOf(oid)).size;
      if (kind === 'random' || size < 4096) t.equal(stored, size, `${kind} ${size}: stored exactly as it arrived`);
      else t.ok(stored < size * 0.5, `${kind} ${size}: stored compressed (${stored} of ${size})`);
    }
  }
});

t.test('each frame is judged by samples: incompressible frames go in untried, compressible ones are compressed', async (t) => {
  // 4 random frames, then text: the random frames are stored raw without a try (their BLAKE3
  // deferred), the text frames after them are compressed, so the framed form is kept.
  const mixed = Buffer.concat([randomBytes(4 * F), textLike(8 * F)]);
  const b = await put(mixed);
  t.ok((await get(b)).body.equals(mixed), 'round trip');
  const stored = statSync(pathOf(b)).size;
  t.ok(stored < mixed.length - 4 * F, `text after incompressible frames compressed (${stored} of ${mixed.length})`);
  // A frame whose first half is random and whose second half is text: a sample reaches the text.
  const half = Buffer.concat([randomBytes(F / 2), textLike(F / 2), randomBytes(F)]);
  const h = await put(half);
  t.ok((await get(h)).body.equals(half), 'half-and-half round trip');
  t.ok(statSync(pathOf(h)).size < half.length - F / 4, 'its text half was found and compressed');
  // Frames 0–3 went in raw without trying, their BLAKE3 deferred to the end and computed from the
  // stored bytes: they must be served, and a damaged one must be caught.
  const inFrame1 = `bytes=${F + 100}-${F + 200}`;
  const before = await get(b, inFrame1);
  t.equal(before.status, 206, 'a range in an untried raw frame is served');
  t.ok(before.body.equals(mixed.subarray(F + 100, F + 201)), 'with its bytes');
  const fd = openSync(pathOf(b), 'r+');
  const one = Buffer.alloc(1);
  readSync(fd, one, 0, 1, F + 150); // frames 0–3 are stored raw, so frame 1 starts at F
  one[0] ^= 0xff;
  writeSync(fd, one, 0, 1, F + 150);
  closeSync(fd);
  t.equal((await get(b, inFrame1)).status, 500, 'damage in a frame whose digest was deferred is detected');
  t.ok((await get(b, `bytes=0-99`)).body.equals(mixed.subarray(0, 100)), 'the frames around it are still served');
});

// Three incompressible frames, then a 1000-byte last frame that shrinks by 5–6%: it saves less than
// the index entries and trailer cost, so the writer turns its frames back into the plain object in
// place (it reads the staging file it wrote, which must therefore be open for reading too).
t.test('an object whose framed form is not smaller is stored as it arrived', async (t) => {
  const data = Buffer.concat([randomBytes(3 * F), randomBytes(930), Buffer.alloc(70)]);
  const oid = await put(data);
  t.equal(statSync(pathOf(oid)).size, data.length, 'stored exactly as it arrived');
  t.ok(readFileSync(pathOf(oid)).equals(data), 'byte for byte');
  t.ok((await get(oid)).body.equals(data), 'served');
});

t.test('every kind of Range against a compressed object', async (t) => {
  const data = textLike(3 * F + 777);
  const oid = await put(data);
  const total = data.length;
  const cases: [string, number, number][] = [
    ['bytes=0-0', 0, 0],
    [`bytes=${F - 10}-${F + 10}`, F - 10, F + 10],
    [`bytes=${F}-${2 * F - 1}`, F, 2 * F - 1],
    [`bytes=${2 * F + 5}-${2 * F + 100}`, 2 * F + 5, 2 * F + 100],
    [`bytes=${total - 1}-`, total - 1, total - 1],
    ['bytes=-1048576', total - 1048576, total - 1],
    [`bytes=5-`, 5, total - 1],
    [`bytes=100-${total + 1000}`, 100, total - 1],
  ];
  for (const [range, s, e] of cases) {
    const r = await get(oid, range);
    t.equal(r.status, 206, range);
    t.equal(r.headers['content-range'], `bytes ${s}-${e}/${total}`, `${range} Content-Range`);
    t.ok(r.body.equals(data.subarray(s, e + 1)), `${range} bytes`);
  }
  t.equal((await get(oid, `bytes=${total}-`)).status, 416);
});

t.test('mixed store: raw objects from before compression and framed ones are both served', async (t) => {
  await server.stop();
  server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'off' }, { dataDir });
  const plain = textLike(F + 99);
  const plainOid = await put(plain);
  t.equal(statSync(pathOf(plainOid)).size, plain.length, 'compression off: stored as it arrived');
  await server.stop();
  server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd:1' }, { dataDir });
  const framed = textLike(F + 100);
  const framedOid = await put(framed);
  t.ok(statSync(pathOf(framedOid)).size < framed.length, 'compression on: framed');
  t.ok((await get(plainOid)).body.equals(plain), 'old raw object still served');
  t.ok((await get(framedOid)).body.equals(framed), 'framed object served');
  t.ok((await get(plainOid, 'bytes=10-20')).body.equals(plain.subarray(10, 21)));
});

t.test('a damaged frame is detected on read: an error, never wrong bytes', async (t) => {
  const data = textLike(3 * F);
  const oid = await put(data);
  const file = pathOf(oid);
  const size = statSync(file).size;
  // Flip a byte in the middle of the stored data (frame 1 or 2 of 3).
  const fd = openSync(file, 'r+');
  const one = Buffer.alloc(1);
  const at = Math.floor(size * 0.6);
  readSync(fd, one, 0, 1, at);
  one[0] ^= 0xff;
  writeSync(fd, one, 0, 1, at);
  closeSync(fd);
  const first = await get(oid, 'bytes=0-1000');
  t.equal(first.status, 206, 'a range in an intact frame is still served');
  t.ok(first.body.equals(data.subarray(0, 1001)));
  // Whole object: the head goes out, then the damaged frame cuts the connection.
  const res = await request(`${server.url}/acme/game/objects/${oid}`, { headers: auth });
  let received = 0;
  let failed = false;
  try {
    for await (const c of res.body) received += (c as Buffer).length;
  } catch {
    failed = true;
  }
  t.ok(failed || res.statusCode >= 500, 'the client sees a failure');
  t.ok(received < data.length, `not the whole (wrong) object: got ${received} of ${data.length}`);
  // A range that starts in the damaged frame is refused before any byte goes out.
  const lastFrames = await get(oid, `bytes=${2 * F}-`);
  const midFrames = await get(oid, `bytes=${F}-${2 * F - 1}`);
  const statuses = [lastFrames.status, midFrames.status];
  t.ok(statuses.includes(500), `the damaged frame answers 500 (${statuses})`);
  const bad = lastFrames.status === 500 ? lastFrames : midFrames;
  t.match(bad.json().message, /damaged/);
  t.equal((await http('GET', `${server.url}/health`)).status, 200, 'server still up');
});

t.test('stats: stored bytes on disk reflect compression', async (t) => {
  const logical = readdirSync(join(dataDir, 'objects')).length;
  t.ok(logical > 0);
  t.ok(readFileSync(join(dataDir, 'index.sqlite')).length > 0);
});

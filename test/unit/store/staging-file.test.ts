import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import t from 'tap';
import { parseOid, type Oid } from '../../../src/protocol/oid.js';
import { AlignedBufferPool } from '../../../src/store/buffer-pool.js';
import { StagingFile } from '../../../src/store/staging-file.js';
import { cachedBytes, supportsDirect } from '../../helpers/page-cache.js';
import { tmpDir } from '../../helpers/start-server.js';

const OID = parseOid('a'.repeat(64)) as Oid;
const MiB = 1 << 20;
const pool = new AlignedBufferPool(MiB, { keep: 4 });

/** Three aligned MiB and a tail that is partly aligned, written as the raw writer does (two in flight). */
async function writeSample(file: StagingFile): Promise<Buffer> {
  const parts: Buffer[] = [];
  const writes: Promise<void>[] = [];
  for (let i = 0; i < 4; i++) {
    const view = pool.takeView();
    const len = i < 3 ? MiB : 2 * 4096 + 1000;
    for (let j = 0; j < len; j++) view[j] = (i * 31 + j * 7) % 253;
    parts.push(Buffer.from(view.subarray(0, len)));
    writes.push(new Promise<void>((resolve) => file.write(view.subarray(0, len), i * MiB, () => resolve(pool.giveView(view)))));
    if (writes.length === 2) await writes.shift();
  }
  await Promise.all(writes);
  return Buffer.concat(parts);
}

const scratch = tmpDir();
t.teardown(() => rmSync(scratch, { recursive: true, force: true }));
const noDirect = supportsDirect(scratch) ? false : `${scratch}: this file system has no O_DIRECT`;

t.test('direct writes: aligned parts bypass the page cache, the tail does not, the bytes are exact', { skip: noDirect }, async (t) => {
  const dir = tmpDir();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const direct = await StagingFile.create(dir, OID, { direct: true });
  t.ok(direct.direct, 'the file got an O_DIRECT descriptor');
  const expected = await writeSample(direct);
  await direct.seal(expected.length);
  const plain = await StagingFile.create(dir, OID);
  t.notOk(plain.direct, 'only when asked');
  t.ok((await writeSample(plain)).equals(expected));
  await plain.seal(expected.length);

  const cachedDirect = cachedBytes(direct.path);
  let cachedPlain = cachedBytes(plain.path);
  // A buffered file stays cached unless memory pressure from other work evicts it first, which one
  // file may meet on a busy machine and three in a row will not; a direct write never fills the cache.
  for (let i = 0; cachedPlain !== null && cachedPlain < 3 * MiB && i < 2; i++) {
    const again = await StagingFile.create(dir, OID);
    await writeSample(again);
    await again.seal(expected.length);
    cachedPlain = Math.max(cachedPlain, cachedBytes(again.path) ?? 0);
    await again.dispose();
  }
  if (cachedDirect === null || cachedPlain === null) t.comment('fincore (util-linux-extra) is not installed: page cache not checked');
  else {
    t.ok(cachedPlain >= 3 * MiB, `buffered writes fill the page cache (${cachedPlain} bytes)`);
    t.ok(cachedDirect <= 64 << 10, `direct writes leave only the unaligned tail there (${cachedDirect} bytes)`);
  }
  t.ok(readFileSync(direct.path).equals(expected), 'read back byte for byte');
  t.ok(readFileSync(plain.path).equals(expected));
  await direct.dispose();
  await plain.dispose();
  t.notOk(existsSync(direct.path), 'disposed files are removed');
});

t.test('memory that is not aligned, or an unaligned position, goes through the page cache', async (t) => {
  const dir = tmpDir();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = await StagingFile.create(dir, OID, { direct: true });
  const heap = Buffer.alloc(MiB, 5); // malloc-backed: O_DIRECT would refuse it with EINVAL
  const aligned = pool.takeView().fill(6);
  await new Promise<void>((resolve) => file.write(heap, 0, resolve));
  await new Promise<void>((resolve) => file.write(aligned.subarray(0, 5000), MiB, resolve)); // aligned memory, fine position
  await new Promise<void>((resolve) => file.write(aligned.subarray(0, 8192), MiB + 5000, resolve)); // unaligned position
  t.equal(file.error, null, 'no write failed');
  await file.seal(MiB + 5000 + 8192);
  const back = readFileSync(file.path);
  t.ok(back.subarray(0, MiB).every((b) => b === 5) && back.subarray(MiB).every((b) => b === 6), 'every byte where it belongs');
  await file.dispose();
});

const shm = `/dev/shm/stowage-staging-${process.pid}`;
if (existsSync('/dev/shm')) execFileSync('mkdir', ['-p', shm]);
t.teardown(() => rmSync(shm, { recursive: true, force: true }));
const shmSkip = !existsSync('/dev/shm') ? 'no /dev/shm here' : supportsDirect(shm) ? 'this /dev/shm accepts O_DIRECT' : false;

t.test('a file system without O_DIRECT (tmpfs) gets ordinary writes', { skip: shmSkip }, async (t) => {
  const dir = shm;
  const file = await StagingFile.create(dir, OID, { direct: true });
  t.notOk(file.direct, 'open with O_DIRECT was refused, so the file has one ordinary descriptor');
  const expected = await writeSample(file);
  await file.seal(expected.length);
  t.ok(readFileSync(file.path).equals(expected), 'bytes exact');
  await file.dispose();
});

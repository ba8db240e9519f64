import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import type { Hasher } from '../../../../src/format/frame-codec.js';
import { FRAME_SIZE } from '../../../../src/format/frame-format.js';
import { parseOid, type Oid } from '../../../../src/protocol/oid.js';
import { DiskBlobStore } from '../../../../src/store/disk.js';
import { CompressingBlobStore } from '../../../../src/store/layers/compress.js';
import { VerifyingBlobStore } from '../../../../src/store/layers/verify.js';
import type { BlobStore } from '../../../../src/store/types.js';
import { HashThread } from '../../../../src/workers/hash-thread.js';
import { WorkerPool } from '../../../../src/workers/pool.js';
import { tmpDir } from '../../../helpers/start-server.js';

// How much of a large upload the verify layer hands down before it asks the socket to wait: the
// memory one transfer holds, whatever its size. Real disk, real hash thread, real frame workers.

const MiB = 1 << 20;
const hasher = new HashThread();
const pool = new WorkerPool(1);
t.teardown(async () => {
  await hasher.close();
  await pool.close();
});

const oidOf = (b: Buffer): Oid => parseOid(createHash('sha256').update(b).digest('hex'))!;

/**
 * Writes `data` in 1 MiB chunks, honouring backpressure, and returns how many bytes write() took
 * before it first returned false. Until then nothing can have completed: the hash thread's replies
 * and the disk's write callbacks arrive on the event loop, which these synchronous writes never yield to.
 */
async function upload(store: BlobStore, data: Buffer): Promise<{ oid: Oid; beforeWait: number }> {
  const oid = oidOf(data);
  const w = await store.createWriter(oid, { expectedSize: data.length });
  let beforeWait = -1;
  for (let at = 0; at < data.length; at += MiB) {
    if (w.write(data.subarray(at, at + MiB))) continue;
    if (beforeWait < 0) beforeWait = at + MiB;
    await new Promise<void>((resolve) => w.onDrain(resolve));
  }
  await w.finish();
  return { oid, beforeWait };
}

t.test('plain: four 1 MiB blocks go down (hashed and written at once) before the socket waits', async (t) => {
  await hasher.warm(); // up: a mid-size upload does not wait for a thread that is starting
  const disk = await DiskBlobStore.open(tmpDir());
  const data = randomBytes(24 * MiB);
  const { oid, beforeWait } = await upload(new VerifyingBlobStore(disk, hasher), data);
  t.equal(beforeWait, 4 * MiB, 'the fifth MiB waits for a block to be hashed and written');
  t.ok(readFileSync(disk.pathOf(oid)).equals(data), 'stored as sent');
});

t.test('compressed: two 2 MiB frames, the same 4 MiB, before the socket waits', async (t) => {
  const disk = await DiskBlobStore.open(tmpDir());
  const data = randomBytes(12 * FRAME_SIZE);
  const store = new VerifyingBlobStore(new CompressingBlobStore(disk, pool, 3), hasher);
  const { oid, beforeWait } = await upload(store, data);
  t.equal(beforeWait, 2 * FRAME_SIZE, 'the third frame waits');
  const r = await store.open(oid);
  t.equal(r?.size, data.length, 'reads back at its logical size');
  await r?.close();
});

/** A real hash thread, not started yet, whose streams are counted. */
function coldThread(t: Test): { thread: HashThread; hasher: Hasher; opened: () => number } {
  const thread = new HashThread();
  t.teardown(() => thread.close());
  let opened = 0;
  const hasher: Hasher = {
    get ready() {
      return thread.ready;
    },
    warm: () => thread.warm(),
    open: () => {
      opened++;
      return thread.open();
    },
  };
  return { thread, hasher, opened: () => opened };
}

t.test('a hash thread that is not up: a mid-size upload is hashed in line while it starts; a large one or one of unknown size waits for it', async (t) => {
  const disk = await DiskBlobStore.open(tmpDir());
  const cold = coldThread(t);
  const store = new VerifyingBlobStore(disk, cold.hasher);
  const first = randomBytes(16 * MiB);
  const a = await upload(store, first);
  t.equal(cold.opened(), 0, 'hashed in line: no stream waited for the thread');
  t.ok(cold.thread.running, 'the thread was started for the uploads after it');
  t.ok(readFileSync(disk.pathOf(a.oid)).equals(first), 'verified and stored as sent');

  await cold.thread.warm();
  t.ok(cold.thread.ready, 'up once warm() resolves');
  await upload(store, randomBytes(16 * MiB));
  t.equal(cold.opened(), 1, 'with the thread up, the next mid-size upload is hashed there');

  const other = coldThread(t);
  const w = await new VerifyingBlobStore(disk, other.hasher).createWriter(oidOf(first), { expectedSize: null });
  t.equal(other.opened(), 1, 'an upload of unknown size (it may be huge) opens its stream on a thread that was not started yet');
  w.write(first);
  await w.finish();
});

t.test('a mid-size upload hashed in line is refused when its bytes do not match its oid', async (t) => {
  const disk = await DiskBlobStore.open(tmpDir());
  const cold = coldThread(t);
  const store = new VerifyingBlobStore(disk, cold.hasher);
  const data = randomBytes(16 * MiB);
  const oid = oidOf(data);
  data[5] ^= 1;
  const w = await store.createWriter(oid, { expectedSize: data.length });
  w.write(data);
  await t.rejects(w.finish(), { code: 'LFS_ERR_DIGEST_MISMATCH' }, 'refused, as on the thread');
  t.equal(cold.opened(), 0, 'it was hashed in line');
  t.equal(await store.stat(oid), null, 'nothing stored');
});

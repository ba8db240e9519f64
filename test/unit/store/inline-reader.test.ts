import { randomBytes } from 'node:crypto';
import { closeSync, openSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { directBuffers, ioBuffers } from '../../../src/store/buffer-pool.js';
import { INLINE_READ_MAX, plainReads, readWhole } from '../../../src/store/inline-reader.js';
import { READ_AHEAD } from '../../../src/store/raw-reader.js';
import { drainChunks } from '../../helpers/data.js';
import { tmpDir } from '../../helpers/start-server.js';

// The reads of plain objects (disk files, journal records): in line for small objects, through the
// threadpool for large ones. Either way the bytes of [start, end] at the object's offset in its
// file, and a file cut short is an error, never a short object.


/** `data` in a new file of the scratch folder, open for reading until the test ends. */
function openedFile(t: Test, name: string, data: Buffer): number {
  const path = join(tmpDir(), name);
  writeFileSync(path, data);
  const fd = openSync(path, 'r');
  t.teardown(() => closeSync(fd));
  return fd;
}

for (const size of [1, 65536, INLINE_READ_MAX, INLINE_READ_MAX + 1, 3 << 20]) {
  t.test(`${size} B object at an offset in its file`, async (t) => {
    const base = 4099; // as a journal record's data sits after its header
    const data = randomBytes(size);
    const fd = openedFile(t, 'file', Buffer.concat([randomBytes(base), data, randomBytes(17)]));
    const reads = plainReads(fd, size, base);
    t.ok((await drainChunks(reads.read(0, size - 1))).equals(data), 'the whole object');
    const start = Math.floor(size / 3);
    const end = Math.max(start, size - 2);
    t.ok((await drainChunks(reads.read(start, end))).equals(data.subarray(start, end + 1)), 'a range of it');
    const into = Buffer.alloc(Math.min(size, 100));
    await reads.readAt(into, size - into.byteLength);
    t.ok(into.equals(data.subarray(size - into.byteLength)), 'readAt its last bytes');
  });
}

t.test('a file cut short fails the read, in line or not', async (t) => {
  for (const size of [65536, INLINE_READ_MAX + 1]) {
    const path = join(tmpDir(), 'cut');
    writeFileSync(path, randomBytes(size));
    truncateSync(path, size - 10);
    const fd = openSync(path, 'r');
    t.teardown(() => closeSync(fd));
    const reads = plainReads(fd, size);
    await t.rejects(drainChunks(reads.read(0, size - 1)), /short read/, `${size} B: read`);
    await t.rejects(reads.readAt(Buffer.alloc(20), size - 20), /short read/, `${size} B: readAt`);
  }
});

t.test('a large read keeps READ_AHEAD reads going and hands every buffer back when closed midway', async (t) => {
  const size = 8 << 20;
  const data = randomBytes(size);
  const fd = openedFile(t, 'large', data);
  const source = plainReads(fd, size).read(0, size - 1);
  const first = await source.next();
  t.ok(first !== null && Buffer.from(first).equals(data.subarray(0, first.byteLength)), 'the first chunk');
  const idle = (): number => ioBuffers.idle + directBuffers.idle; // read buffers come from either
  const idleBefore = idle();
  await source.close();
  // The chunk handed out and the READ_AHEAD being read all went back (some may still have been reading).
  t.equal(idle(), idleBefore + READ_AHEAD + 1, `${READ_AHEAD + 1} buffers back in the pool after close`);
  t.equal(await source.next(), null, 'nothing after close');
});

t.test("a large read takes an upload's idle buffers first and gives them back to the upload pool", async (t) => {
  const size = 6 << 20;
  const data = randomBytes(size);
  const fd = openedFile(t, 'after-upload', data);
  // Two idle upload buffers, as an upload leaves them: the read takes those, then plain ones.
  const left = [directBuffers.takeView(), directBuffers.takeView()];
  for (const b of left) directBuffers.giveView(b);
  const alignedIdle = directBuffers.idle;
  const plainIdle = ioBuffers.idle;
  t.ok(alignedIdle >= 2, 'the upload pool holds idle buffers');
  const source = plainReads(fd, size).read(0, size - 1);
  const first = Buffer.from((await source.next())!); // a copy: the buffer goes back at the next read
  t.equal(directBuffers.idle, 0, 'the reads took the idle upload buffers first');
  const rest = await drainChunks(source);
  t.ok(Buffer.concat([first, rest]).equals(data), 'the whole object, read through both kinds of buffer');
  await source.close();
  t.equal(directBuffers.idle, alignedIdle, 'every upload buffer went back to the upload pool');
  t.equal(ioBuffers.idle, Math.max(plainIdle, READ_AHEAD + 1 - alignedIdle), 'the plain buffers that made up the rest went back to theirs');
});

t.test('a small object read whole at open: ranges and readAt from memory, the buffer back at close', async (t) => {
  for (const size of [0, 1, 65536, INLINE_READ_MAX]) {
    const data = randomBytes(size);
    const path = join(tmpDir(), 'whole');
    writeFileSync(path, data);
    const fd = openSync(path, 'r');
    const reader = readWhole(fd, size);
    closeSync(fd); // the bytes are held: the descriptor is not needed any more
    if (size > 0) {
      t.ok((await drainChunks(reader.read(0, size - 1))).equals(data), `${size} B: the whole object`);
      const start = Math.floor(size / 3);
      t.ok((await drainChunks(reader.read(start, size - 1))).equals(data.subarray(start)), `${size} B: a range of it`);
      const into = Buffer.alloc(Math.min(size, 64));
      await reader.readAt(into, size - into.byteLength);
      t.ok(into.equals(data.subarray(size - into.byteLength)), `${size} B: readAt its last bytes`);
      await t.rejects(reader.readAt(Buffer.alloc(2), size - 1), /past the object/, `${size} B: readAt past the end is an error, not a short read`);
      await t.rejects(drainChunks(reader.read(0, size)), /past the object/, `${size} B: a range past the end is an error`);
    }
    await reader.close();
    await t.rejects(reader.readAt(Buffer.alloc(1), 0), /after its reader was closed/, `${size} B: nothing is read after close`);
    await reader.close(); // twice is harmless
  }
});

t.test('a file shorter than its size fails at open, not later', async (t) => {
  const path = join(tmpDir(), 'short');
  writeFileSync(path, randomBytes(1000));
  const fd = openSync(path, 'r');
  t.teardown(() => closeSync(fd));
  t.throws(() => readWhole(fd, 2000), /short read/);
});

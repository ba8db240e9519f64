import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { parseOid, type Oid } from '../../../src/protocol/oid.js';
import { DiskBlobStore } from '../../../src/store/disk.js';
import { tmpDir } from '../../helpers/start-server.js';

// Small objects of known size are written whole with in-line calls (disk.ts #writeInLine), as the
// journal writes its small objects out. The conformance suite covers what any write must do; these
// cases cover what is particular to that path: the threshold, and cleanup when the placing fails.

const oidOf = (data: Buffer): Oid => parseOid(createHash('sha256').update(data).digest('hex'))!;
const staged = (root: string): string[] => readdirSync(join(root, 'staging'));

async function put(store: DiskBlobStore, data: Buffer, options: { replace?: boolean; oid?: Oid } = {}): Promise<{ created: boolean; size: number }> {
  const w = await store.createWriter(options.oid ?? oidOf(data), { expectedSize: data.length, replace: options.replace });
  w.write(data);
  return w.finish();
}

t.test('small objects written whole: in place, byte for byte, once', async (t) => {
  const root = tmpDir();
  const store = await DiskBlobStore.open(root);
  for (const size of [0, 1, 65536, 256 << 10, (256 << 10) + 1]) {
    const data = randomBytes(size);
    const first = await put(store, data);
    t.same(first, { size, storedSize: size, created: true }, `${size} B stored`);
    t.ok(readFileSync(store.pathOf(oidOf(data))).equals(data), `${size} B: bytes intact`);
    t.same((await put(store, data)).created, false, `${size} B: a second copy is dropped`);
    t.same(staged(root), [], `${size} B: nothing left in staging`);
  }
  // A replacement (maintenance re-encoding) is renamed over the stored copy.
  const data = randomBytes(1000);
  const oid = oidOf(data);
  await put(store, data);
  const other = randomBytes(1000);
  t.same(await put(store, other, { oid, replace: true }), { size: 1000, storedSize: 1000, created: true });
  t.ok(readFileSync(store.pathOf(oid)).equals(other), 'replaced');
  t.same(staged(root), []);
});

t.test('a write that cannot be put in place leaves no staging file and no object', async (t) => {
  const root = tmpDir();
  const store = await DiskBlobStore.open(root);
  const data = randomBytes(4096);
  const oid = oidOf(data);
  // The object's fan-out folder cannot be made: a file stands where it should be.
  writeFileSync(join(root, 'objects', oid.slice(0, 2)), 'in the way');
  await t.rejects(put(store, data), { code: 'ENOTDIR' });
  t.same(staged(root), [], 'the staging file is removed');
  t.notOk(existsSync(store.pathOf(oid)));
});

import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { DiskBlobStore } from '../../../src/store/disk.js';
import type { Oid } from '../../../src/protocol/oid.js';

// list() feeds sweeps that delete what no listed object names (unused data keys, the cache ledger):
// a folder it cannot read must end the listing, never read as empty.

const scratch = mkdtempSync(join(tmpdir(), 'stowage-disk-list-'));
t.teardown(() => rmSync(scratch, { recursive: true, force: true }));

async function storeWithOne(dir: string): Promise<{ store: DiskBlobStore; oid: Oid }> {
  const store = await DiskBlobStore.open(dir, { directIo: false });
  const bytes = Buffer.from('one object');
  const oid = createHash('sha256').update(bytes).digest('hex') as Oid;
  const w = await store.createWriter(oid, { expectedSize: bytes.byteLength });
  w.write(bytes);
  await w.finish();
  return { store, oid };
}

async function listed(store: DiskBlobStore): Promise<string[]> {
  const out: string[] = [];
  for await (const o of store.list()) out.push(o.oid);
  return out;
}

t.test('stray files where folders would be are passed over', async (t) => {
  const dir = join(scratch, 'stray');
  const { store, oid } = await storeWithOne(dir);
  writeFileSync(join(dir, 'objects', 'ff'), 'not a folder');
  mkdirSync(join(dir, 'objects', 'ee'));
  writeFileSync(join(dir, 'objects', 'ee', 'dd'), 'not a folder either');
  t.same(await listed(store), [oid]);
});

t.test('a folder that cannot be read ends the listing with its error', async (t) => {
  const dir = join(scratch, 'loop');
  const { store } = await storeWithOne(dir);
  // A symbolic link to itself: reading it fails with ELOOP, as an unreadable folder would with EIO.
  symlinkSync('aa', join(dir, 'objects', 'aa'));
  await t.rejects(listed(store), { code: 'ELOOP' });
});

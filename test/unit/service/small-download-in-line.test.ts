import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { openSqliteIndex } from '../../../src/db/sqlite/sqlite-index.js';
import { Metrics } from '../../../src/metrics/registry.js';
import { parseOid, type Oid } from '../../../src/protocol/oid.js';
import { parseRepoName } from '../../../src/protocol/repo-name.js';
import { DownloadGrants } from '../../../src/service/download-grants.js';
import { TransferService } from '../../../src/service/transfer-service.js';
import { DiskBlobStore } from '../../../src/store/disk.js';
import { INLINE_READ_MAX } from '../../../src/store/inline-reader.js';
import type { BlobStore } from '../../../src/store/types.js';
import { tmpDir } from '../../helpers/start-server.js';

// TransferService.openInLine, on a real disk store and a real SQLite index: a small object's bytes
// at once only for a download the batch has just granted to that repository, the grant then used up;
// anything else is left to openForDownload with the grant untouched.

const game = parseRepoName('acme', 'game')!;
const other = parseRepoName('acme', 'other')!;

async function store(s: BlobStore, data: Buffer): Promise<Oid> {
  const oid = parseOid(createHash('sha256').update(data).digest('hex'))!;
  const w = await s.createWriter(oid, { expectedSize: data.length });
  w.write(data);
  await w.finish();
  return oid;
}

t.test('a granted small object is read in line once; anything else is left to openForDownload', async (t) => {
  const dir = tmpDir();
  const db = openSqliteIndex(join(dir, 'index.sqlite'));
  t.teardown(() => db.close());
  const disk = await DiskBlobStore.open(join(dir, 'store'));
  const ungranted = new TransferService(disk, db.objects, new Metrics());
  const small = randomBytes(64 << 10);
  const oid = await store(disk, small);
  await db.objects.addReference(game.key, oid, small.length, small.length);

  t.equal(ungranted.openInLine(game, oid), undefined, 'without grants (no batch answered): nothing in line');
  const grants = new DownloadGrants();
  const transfers = new TransferService(disk, db.objects, new Metrics(), { grants });
  t.equal(transfers.openInLine(game, oid), undefined, 'no batch granted it: nothing in line');

  grants.grant(other.key, oid);
  t.equal(transfers.openInLine(game, oid), undefined, 'a grant to another repository does not serve this one');
  t.ok(grants.has(other.key, oid), 'and stays for the repository it was made for');

  grants.grant(game.key, oid);
  const held = transfers.openInLine(game, oid);
  t.ok(held?.bytes.equals(small), 'granted: the object\'s bytes at once');
  held?.release();
  t.notOk(grants.has(game.key, oid), 'the grant is used up');
  t.equal(transfers.openInLine(game, oid), undefined, 'a second GET is not in line');
  const reader = await transfers.openForDownload(game, oid);
  t.equal(reader.size, small.length, 'openForDownload (the index) still serves it');
  await reader.close();

  const large = randomBytes(INLINE_READ_MAX + 1);
  const largeOid = await store(disk, large);
  grants.grant(game.key, largeOid);
  t.equal(transfers.openInLine(game, largeOid), undefined, 'a large object is read through open');
  t.ok(grants.has(game.key, largeOid), 'its grant kept for openForDownload');

  const missing = parseOid(createHash('sha256').update('never stored').digest('hex'))!;
  grants.grant(game.key, missing);
  t.equal(transfers.openInLine(game, missing), undefined, 'bytes the store lacks: nothing in line');
  t.ok(grants.has(game.key, missing), 'and the grant is left to openForDownload, which asks the index');

  grants.grant(game.key, oid);
  transfers.withdrawGrants(oid);
  t.equal(transfers.openInLine(game, oid), undefined, 'a withdrawn grant (retain, audit) serves nothing in line');
});

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { DirSyncer } from '../../../src/store/dir-sync.js';
import { tmpDir } from '../../helpers/start-server.js';

// The directory fsyncs behind every durable rename and link (store/dir-sync.ts): real folders on
// the real file system; what a sync cannot do is refused, never skipped.

t.test('syncs of real folders resolve, many at once included', async (t) => {
  const root = tmpDir();
  const dirs = Array.from({ length: 20 }, (_, i) => join(root, `d${i % 5}`));
  for (const d of new Set(dirs)) mkdirSync(d);
  const syncer = new DirSyncer();
  const results = await Promise.allSettled(dirs.map((d) => syncer.sync(d)));
  t.same(results.map((r) => r.status), dirs.map(() => 'fulfilled'), 'every waiter is told its folder was synced');
});

t.test('a folder that is gone or is not a folder fails its waiters, and the syncer goes on', async (t) => {
  const root = tmpDir();
  const syncer = new DirSyncer();
  await t.rejects(syncer.sync(join(root, 'missing')), { code: 'ENOENT' }, 'a missing folder is an error, not a sync');
  const file = join(root, 'plain-file');
  writeFileSync(file, 'x');
  await t.rejects(syncer.sync(file), { code: 'ENOTDIR' }, 'only folders are opened: nothing that could block on open');
  const dir = join(root, 'later');
  mkdirSync(dir);
  await t.resolves(syncer.sync(dir), 'a later sync of a real folder still works');
});

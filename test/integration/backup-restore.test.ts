import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import { pushableGame } from '../helpers/forge-emulator.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { SMALL_OBJECT_MAX } from '../../src/store/journal/journaling-store.js';
import { basic, blob, blobOf, http, push, type Blob } from '../helpers/lfs-http.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// The restore drill of docs/operations.md, exactly as documented: `npm run backup` (dist/src/backup.js)
// against a live server taking uploads, the backup copied into an empty data directory, a server
// started on it. Every object acknowledged before the backup started must come back intact; an
// object acknowledged during it may be absent, but never present with wrong bytes.
const BACKUP = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/backup.js');
const run = promisify(execFile);

const { forge, env } = await pushableGame(t);
// Rekey (in the encrypted store's test) needs admin.
forge.tokens.set('tok-admin', { login: 'boss', repos: { 'acme/game': 'admin' } });
const get = (url: string, oid: string) => http('GET', `${url}/acme/game/objects/${oid}`, { headers: { authorization: basic('tok') } });

t.test('backup under concurrent uploads, restore into a new data directory: nothing acknowledged is lost', async (t) => {
  const live = await startServer(env);
  t.teardown(() => live.stop());

  // Small objects travel in the journal, the 3 MiB ones as files of their own.
  const before: Blob[] = [];
  for (let i = 0; i < 30; i++) before.push(blob(i % 5 === 4 ? 3_000_000 : 65_536));
  const statuses = await Promise.all(before.map((o) => push(live.url, 'acme/game', 'tok', o)));
  t.ok(statuses.every((s) => s === 200), 'the first objects are acknowledged');

  // Uploaders keep going while the backup runs; each records what was acknowledged and when.
  let backupStarted = false;
  let stop = false;
  const ackedBefore: Blob[] = [...before];
  const ackedDuring: Blob[] = [];
  let laneAcked: () => void = () => {};
  const allLanesAcked = new Promise<void>((resolve) => {
    let waiting = 4;
    laneAcked = () => {
      if (--waiting === 0) resolve();
    };
  });
  const uploader = async (lane: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      const o = blob(i % 4 === lane % 4 ? 2_000_000 : 65_536);
      const startedBefore = !backupStarted;
      const status = await push(live.url, 'acme/game', 'tok', o);
      if (status !== 200) throw new Error(`upload answered ${status}`);
      // Only an upload acknowledged before the backup began must be in it.
      (startedBefore && !backupStarted ? ackedBefore : ackedDuring).push(o);
      if (i === 0) laneAcked();
    }
  };
  const lanes = [0, 1, 2, 3].map((lane) => uploader(lane));
  // Let every lane get one acknowledgement in first, so uploads really overlap the backup.
  await Promise.race([allLanesAcked, Promise.all(lanes)]);

  const dest = join(tmpDir('stowage-backup-'), 'snapshot');
  backupStarted = true;
  const out = await run(process.execPath, [BACKUP, '--data-dir', live.dataDir, '--to', dest]);
  stop = true;
  await Promise.all(lanes);
  t.match(out.stdout, /^index: \d+ pages copied/m, 'step 1: the index snapshot');
  t.match(out.stdout, /^journal: [1-9]\d* segments/m, 'step 2: the journal, holding the newest small objects');
  t.match(out.stdout, /^objects: \d+ copied/m, 'step 3: the object files');
  t.ok(ackedDuring.length > 0, `${ackedDuring.length} uploads were acknowledged while the backup ran`);

  // Restore: the backup copied into an empty data directory, a new server started on it.
  const restored = tmpDir('stowage-restored-');
  cpSync(dest, restored, { recursive: true });
  const again = await startServer(env, { dataDir: restored });
  t.teardown(() => again.stop());
  let intact = 0;
  for (const o of ackedBefore) {
    const res = await get(again.url, o.oid);
    if (res.status === 200 && res.body.equals(o.data)) intact++;
    else t.fail(`${o.oid} (${o.size} bytes) acknowledged before the backup: ${res.status}`);
  }
  t.equal(intact, ackedBefore.length, `all ${ackedBefore.length} objects acknowledged before the backup are back, byte for byte`);
  for (const o of ackedDuring) {
    const res = await get(again.url, o.oid);
    t.ok(res.status === 404 || (res.status === 200 && res.body.equals(o.data)), `an object acknowledged during the backup is intact or absent (${res.status})`);
  }

  // A second backup into the same place copies only what is new, and starts the journal afresh.
  const second = await run(process.execPath, [BACKUP, '--data-dir', live.dataDir, '--to', dest]);
  t.match(second.stdout, /already in/, 'incremental');
  t.notMatch(second.stdout, /^objects: 0 copied.*, 0 already/m, 'objects already copied are skipped');
  t.ok(readdirSync(join(dest, 'journal')).every((n) => /^seg-\d{12}\.log$/.test(n)), 'only journal segments are copied (no spare)');
});

t.test('the backup command refuses unknown options and missing arguments with exit 2', async (t) => {
  for (const args of [['--data-dir', 'x'], ['--data-dir', 'x', '--to', 'y', '--bogus']]) {
    const r = await run(process.execPath, [BACKUP, ...args]).then(() => ({ code: 0, stderr: '' }), (e: { code: number; stderr: string }) => e);
    t.equal(r.code, 2, `${args.join(' ')}: exit 2`);
    t.match(r.stderr, /usage: npm run backup/, 'with the usage');
  }
});

t.test('an encrypted store: the backup holds ciphertext and wrapped keys only; a restore with the key file reads everything', async (t) => {
  const keyFile = join(tmpDir('stowage-keys-'), 'keys');
  writeFileSync(keyFile, `k1 ${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
  const encEnv = { ...env, SVC_ENCRYPTION_KEY_FILE: keyFile, SVC_COMPRESSION: 'zstd' };
  const live = await startServer(encEnv);
  t.teardown(() => live.stop());
  const MARK = 'unreleased-cutscene-script';
  const marked = (n: number): Buffer => Buffer.from(`${MARK} line ${n}\n`.repeat(Math.ceil(n / 30)).slice(0, n));
  const objects = [blobOf(marked(65_536)), blobOf(marked(3_000_000)), blob(65_536), blob(2_000_000)];
  for (const o of objects) t.equal(await push(live.url, 'acme/game', 'tok', o), 200, `${o.size} bytes acknowledged`);

  const dest = join(tmpDir('stowage-backup-'), 'snapshot');
  await run(process.execPath, [BACKUP, '--data-dir', live.dataDir, '--to', dest]);
  const needles = [Buffer.from(MARK), ...objects.filter((o) => !o.data.includes(MARK)).map((o) => o.data.subarray(4096, 4160))];
  const clear = readdirSync(dest, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .filter((e) => needles.some((n) => readFileSync(join(e.parentPath, e.name)).includes(n)));
  t.same(clear.map((e) => e.name), [], 'no file of the backup holds known plaintext (objects, journal, index)');
  const copy = openSqliteIndex(join(dest, 'index.sqlite'));
  const rows = await copy.dataKeys.dataKeysNotWrappedWith('none', null, 1000);
  t.same(await copy.dataKeys.kekIdsInUse(), ['k1'], 'the index copy holds the data keys, wrapped under k1');
  // Small objects may still be sealed in the journal (their keys wrapped in its segments): the others have their rows.
  const filed = objects.filter((o) => o.size > SMALL_OBJECT_MAX).length;
  t.ok(rows.length >= filed && rows.every((r) => r.wrapped.length === 60), `${rows.length} wrapped data keys (nonce, wrapped key, tag)`);
  await copy.close();

  // A rekey between two backups into the same place rewrites objects at the same size: the second
  // backup must copy them again, or the restore would hold copies whose data keys are gone.
  const rekey = await http('POST', `${live.url}/acme/game/objects/rekey`, { headers: { authorization: basic('tok-admin'), 'content-type': 'application/json' }, body: '{}' });
  t.equal(rekey.status, 200, 'rekey between the backups');
  await run(process.execPath, [BACKUP, '--data-dir', live.dataDir, '--to', dest]);

  const restored = tmpDir('stowage-restored-');
  cpSync(dest, restored, { recursive: true });
  const again = await startServer(encEnv, { dataDir: restored });
  t.teardown(() => again.stop());
  let intact = 0;
  for (const o of objects) {
    const res = await get(again.url, o.oid);
    if (res.status === 200 && res.body.equals(o.data)) intact++;
    else t.fail(`${o.oid} (${o.size} bytes): ${res.status} ${res.body.toString().slice(0, 200)}`);
  }
  t.equal(intact, objects.length, 'restored with the key file: every object reads back byte for byte');
});

import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { classifyObjectPath, parseImportLayout, resolveImportSource, walkLayout, type LayoutEntry } from '../../../src/store/foreign-layout.js';

// The layouts import reads (gitea RelativePath, gitlab LfsObjectUploader, lfs-test-server
// transformKey: `ab/cd/<oid[4:]>`; a git-lfs clone: `ab/cd/<oid>`), the walk, and the confinement
// of the source folder to SVC_IMPORT_DIR.

const OID = '4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393';
const parts = (oid: string, full: boolean): string[] => [oid.slice(0, 2), oid.slice(2, 4), full ? oid : oid.slice(4)];

t.test('classify: each form names the oid, the other form is reported as the wrong layout', async (t) => {
  t.same(classifyObjectPath(parts(OID, false), 'rest'), { oid: OID });
  t.same(classifyObjectPath(parts(OID, true), 'full'), { oid: OID });
  t.same(classifyObjectPath(parts(OID, true), 'rest'), { stray: 'other_layout' });
  t.same(classifyObjectPath(parts(OID, false), 'full'), { stray: 'other_layout' });
  t.same(classifyObjectPath(['4d', '7a', `${OID}.refused`], 'full'), { stray: 'set_aside' });
  t.same(classifyObjectPath(['4d', '7a', `${OID.slice(4)}.tmp`], 'rest'), { stray: 'not_an_object' }, "lfs-test-server's temp file");
  t.same(classifyObjectPath(['4d', '7b', OID], 'full'), { stray: 'not_an_object' }, 'folders that do not match the name');
  t.same(classifyObjectPath(['4D', '7A', OID.slice(4).toUpperCase()], 'rest'), { stray: 'not_an_object' }, 'oids are lowercase');
  t.same(classifyObjectPath([OID], 'full'), { stray: 'not_an_object' }, 'not in shard folders');
  t.same(classifyObjectPath(['4d', '7a', 'x', OID], 'full'), { stray: 'not_an_object' }, 'too deep');
});

t.test('layout names', async (t) => {
  for (const n of ['gitea', 'forgejo', 'gitlab', 'lfs-test-server', 'git-lfs']) t.equal(parseImportLayout(n), n);
  for (const n of ['Gitea', 'toString', '__proto__', '', 3, null]) t.equal(parseImportLayout(n), null, String(n));
});

t.test('walk: objects with their size, strays with why; links are never followed', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'stowage-walk-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, '4d', '7a'), { recursive: true });
  writeFileSync(join(dir, ...parts(OID, false)), 'abc');
  writeFileSync(join(dir, 'notes.txt'), 'x');
  const outside = mkdtempSync(join(tmpdir(), 'stowage-walk-out-'));
  t.teardown(() => rmSync(outside, { recursive: true, force: true }));
  mkdirSync(join(outside, 'aa', 'bb'), { recursive: true });
  writeFileSync(join(outside, 'aa', 'bb', 'c'.repeat(60)), 'secret');
  symlinkSync(outside, join(dir, 'link'));
  const seen: LayoutEntry[] = [];
  for await (const e of walkLayout(dir, 'rest')) seen.push(e);
  const byRel = Object.fromEntries(seen.map((e) => [e.rel, e]));
  t.match(byRel[parts(OID, false).join('/')], { kind: 'object', oid: OID, size: 3 });
  t.match(byRel['notes.txt'], { kind: 'stray', reason: 'not_an_object' });
  t.match(byRel.link, { kind: 'stray', reason: 'not_a_file' }, 'a symbolic link is reported, not entered');
  t.equal(seen.length, 3);
  const none: LayoutEntry[] = [];
  for await (const e of walkLayout(join(dir, 'missing'), 'rest')) none.push(e);
  t.same(none, [], 'a missing root yields nothing');
});

t.test('source: only plain folders inside the import root, after links are resolved', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'stowage-src-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'gitea', 'lfs'), { recursive: true });
  symlinkSync(tmpdir(), join(root, 'out'));
  symlinkSync(join(root, 'gitea'), join(root, 'in'));
  t.same(await resolveImportSource(root, ''), { path: root });
  t.same(await resolveImportSource(root, 'gitea/lfs/'), { path: join(root, 'gitea', 'lfs') });
  t.same(await resolveImportSource(root, 'in/lfs'), { path: join(root, 'gitea', 'lfs') }, 'a link that stays inside is fine');
  t.match(await resolveImportSource(root, 'out'), { problem: /outside SVC_IMPORT_DIR/ });
  t.match(await resolveImportSource(root, 'gitea/../..'), { problem: /no \. or \.\. segments/ });
  t.match(await resolveImportSource(root, 'a\\b'), { problem: /plain folder names/ });
  t.match(await resolveImportSource(root, '/etc'), { problem: /absolute/ });
  t.match(await resolveImportSource(join(root, 'nope'), ''), { problem: /SVC_IMPORT_DIR does not exist/ });
});

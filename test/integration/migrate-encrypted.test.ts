import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import t from 'tap';
import { KeyRing } from '../../src/crypto/key-ring.js';
import { connect } from '../../src/db/postgres/pg-client.js';
import { PostgresTables } from '../../src/db/postgres/postgres-tables.js';
import { SegmentLog } from '../../src/store/journal/segment-log.js';
import { textLike } from '../helpers/data.js';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, http } from '../helpers/lfs-http.js';
import { startPostgres } from '../helpers/postgres.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, waitForFile } from '../helpers/start-server.js';
import { capped } from '../helpers/wait-for.js';

// `stowage migrate --objects` of a single node whose disk store holds encrypted copies (and one
// plain copy from before encryption was turned on), into the S3 stand-in and a throwaway
// PostgreSQL: the copies are read with the node's keys, sealed again in the bucket under fresh data
// keys of the target index (no known plaintext in any key of the bucket), read back by verify, and
// served by a node started on the target; a key missing from the key file refuses, naming it.
const CLI = resolve(dirname(fileURLToPath(import.meta.url)), '../../src/cli.js');
const REPO = 'acme/game';
const oidOf = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set(REPO, { private: true });
forge.tokens.set('tok-push', { login: 'dev', repos: { [REPO]: 'push' } });
const pg = await startPostgres((fn) => t.teardown(fn));
const s3 = await startS3Server(tmpDir('stowage-migrate-encrypted-s3-'));
t.teardown(() => s3.stop());

const keyDir = tmpDir('stowage-migrate-encrypted-keys-');
function keyFile(name: string, ids: string[]): string {
  const path = join(keyDir, name);
  writeFileSync(path, ids.map((id) => `${id} ${randomBytes(32).toString('base64')}\n`).join(''), { mode: 0o600 });
  return path;
}
const k1 = keyFile('k1', ['k1']);
const otherKey = keyFile('k2', ['k2']);

/** `len` bytes of `body` with a unique marker written into it every 64 KiB: the plaintext to look for. */
function marked(name: string, body: Buffer): { name: string; marker: string; data: Buffer } {
  const marker = `PLAINTEXT-MARKER-${name}-${randomBytes(6).toString('hex')}`;
  const data = Buffer.concat([Buffer.from(marker), body]);
  for (let at = 65_536; at + marker.length < data.length; at += 65_536) data.write(marker, at, 'latin1');
  return { name, marker, data };
}
const plainFirst = marked('plain', randomBytes(50_000));
const sealed = [marked('tiny', Buffer.from(' a tiny object')), marked('small', randomBytes(200_000)), marked('multi-frame-text', textLike(700_000, 5))];
const all = [plainFirst, ...sealed];
const markers = all.map((o) => o.marker);

/** Which markers are in which files under `dir`. */
function plaintextIn(dir: string): string[] {
  const files = readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
  if (files.length === 0) throw new Error(`nothing under ${dir} to look in`);
  return files.flatMap((e) => {
    const bytes = readFileSync(join(e.parentPath, e.name));
    return markers.filter((m) => bytes.includes(m, 0, 'latin1')).map((m) => `${m} in ${join(e.parentPath, e.name)}`);
  });
}

async function put(url: string, data: Buffer): Promise<void> {
  const res = await http('PUT', `${url}/${REPO}/objects/${oidOf(data)}`, { headers: { authorization: basic('tok-push') }, body: data });
  if (res.status !== 200) throw new Error(`PUT ${res.status} ${res.body}`);
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}
/** `stowage migrate …` as the operator runs it. */
function migrate(args: string[], env: Record<string, string>): Promise<Run> {
  const child = spawn(process.execPath, [CLI, 'migrate', ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { stdout: '', stderr: '' };
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out.stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (out.stderr += c));
  return capped(new Promise<Run>((res) => child.on('close', (code) => res({ code, ...out }))), 'stowage migrate to exit');
}

// The single node: one object stored plain, then encryption turned on (compressed, as the node had it).
const dataDir = tmpDir('stowage-migrate-encrypted-');
const plainNode = await startServer({ SVC_FORGE_A_API_URL: forge.url }, { dataDir, keepData: true });
await put(plainNode.url, plainFirst.data);
await plainNode.stop();
const node = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd:3', SVC_ENCRYPTION_KEY_FILE: k1 }, { dataDir, keepData: true });
for (const o of sealed) await put(node.url, o.data);
// Small objects are journaled (sealed) first: once written out, the index holds their data keys.
for (const o of sealed) await waitForFile(join(dataDir, 'objects', oidOf(o.data).slice(0, 2), oidOf(o.data).slice(2, 4), oidOf(o.data)));
await node.stop();

const sourceKeyIds = (): string[] => {
  const db = new Database(join(dataDir, 'index.sqlite'), { readonly: true });
  try {
    return (db.prepare('SELECT data_key_id FROM data_keys').all() as { data_key_id: string }[]).map((r) => r.data_key_id);
  } finally {
    db.close();
  }
};
/** A migration target: its own database and its own prefix of the bucket (one folder of the stand-in). */
async function newTarget(prefix: string) {
  return { url: await pg.createDatabase(), env: { SVC_DATA_DIR: dataDir, ...s3.env({ SVC_S3_PREFIX: prefix }) }, dir: join(s3.dir, s3.bucket, prefix) };
}
const sealedTarget = await newTarget('sealed');
const plainTarget = await newTarget('plain');

interface Report {
  verified: boolean;
  problems: string[];
  tables: { table: string; source_rows: number; copied: number; target_rows: number; verified: boolean }[];
  objects: { total: number; copied: number; already_in_bucket: number; refused: unknown[]; unreadable_in_bucket: unknown[] };
}
const reportOf = (r: Run): Report => JSON.parse(r.stdout) as Report;
const dataKeysRow = (r: Report) => r.tables.find((x) => x.table === 'data_keys')!;
const k1Env = { SVC_ENCRYPTION_KEY_FILE: k1 };

t.test('a key missing from the key file refuses the migration, naming the key, before anything is written', async (t) => {
  t.ok(sourceKeyIds().length >= sealed.length, 'the source holds data keys under k1');
  for (const [what, keys, why] of [
    ['a ring without k1', { SVC_ENCRYPTION_KEY_FILE: otherKey }, /^stowage: migrate: encryption keys: objects are encrypted under key k1 and the key ring lacks it$/m],
    ['no keys at all', {}, /^stowage: migrate: encryption keys: objects are encrypted under key k1 and no encryption key is given/m],
  ] as const) {
    const r = await migrate(['--to', sealedTarget.url, '--objects'], { ...sealedTarget.env, ...keys });
    t.equal(r.code, 2, `${what}: exit 2`);
    t.match(r.stderr, why, `${what}: names the key`);
    t.notMatch(r.stderr, /stop the server/, `${what}: not taken for a running server`);
  }
  const dry = await migrate(['--to', sealedTarget.url, '--objects', '--dry-run'], { ...sealedTarget.env, SVC_ENCRYPTION_KEY_FILE: otherKey });
  t.equal(dry.code, 2, 'a dry run refuses too');
  t.match(dry.stderr, /under key k1 and the key ring lacks it/);
  const dst = await PostgresTables.open(sealedTarget.url, false);
  t.notOk(await dst.hasSchema(), 'the target database is untouched');
  await dst.close();
});

// A small upload acknowledged just before the node stopped is only in its journal, sealed: the index
// names no data key yet, and the journal's replay refuses the missing key as the index's check does.
t.test('a journal segment sealed under a key missing from the key file refuses the migration, naming the key', async (t) => {
  const journaled = tmpDir('stowage-migrate-journaled-');
  await (await startServer({ SVC_FORGE_A_API_URL: forge.url }, { dataDir: journaled, keepData: true })).stop();
  const ringK1 = KeyRing.parse(readFileSync(k1, 'utf8'));
  const journal = await SegmentLog.open(join(journaled, 'journal'), Date.now, { ring: ringK1, seal: true });
  const data = Buffer.from(`a small upload ${randomBytes(8).toString('hex')}`);
  await journal.append({ repo: REPO, oid: oidOf(data) as never, size: data.length, data });
  await journal.close();
  const target = await newTarget('journaled');
  const r = await migrate(['--to', target.url, '--objects'], { ...target.env, SVC_DATA_DIR: journaled, SVC_ENCRYPTION_KEY_FILE: otherKey });
  t.equal(r.code, 2, 'exit 2');
  t.match(r.stderr, /^stowage: migrate: encryption keys: journal segments are sealed under key k1 \(.*\) and the key ring lacks it$/m, 'names the key');
  t.notMatch(r.stderr, /stop the server/, 'not taken for a running server');
});

t.test('encryption on: every copy sealed anew in the bucket, verified by reading back, served by a node on the target', async (t) => {
  const { url, env, dir } = sealedTarget;
  const r = await migrate(['--to', url, '--objects', '--json'], { ...env, ...k1Env });
  t.equal(r.code, 0, r.stderr);
  const report = reportOf(r);
  t.same(report.problems, []);
  t.equal(report.verified, true);
  t.match(report.objects, { total: all.length, copied: all.length, refused: [], unreadable_in_bucket: [] }, 'every object read with the node\'s keys and copied');
  t.match(r.stderr, new RegExp(`verifying: ${all.length} objects read back from the bucket`), 'verify read every object back');
  t.match(dataKeysRow(report), { source_rows: sourceKeyIds().length, copied: 0, target_rows: all.length, verified: true }, 'one fresh data key per bucket copy, none of the source\'s rows');
  t.same(plaintextIn(dir), [], 'no known plaintext in any key of the bucket (the copy stored plain on the node included)');

  const { sql } = connect(url);
  const targetKeyIds = (await sql<{ data_key_id: string }[]>`SELECT data_key_id FROM data_keys`).map((x) => x.data_key_id);
  await sql.end();
  const sourceIds = new Set(sourceKeyIds());
  t.same(targetKeyIds.filter((id) => sourceIds.has(id)), [], 'none of the source\'s data keys is in the target');

  const again = await migrate(['--to', url, '--objects', '--json'], { ...env, ...k1Env });
  t.equal(again.code, 0, again.stdout);
  t.match(reportOf(again), { verified: true, objects: { copied: 0, already_in_bucket: all.length } }, 'a rerun finds every sealed copy and copies nothing');

  const served = await startServer({ ...env, SVC_DATABASE_URL: url, SVC_FORGE_A_API_URL: forge.url, ...k1Env });
  t.teardown(() => served.stop());
  for (const o of all) {
    const res = await http('GET', `${served.url}/${REPO}/objects/${oidOf(o.data)}`, { headers: { authorization: basic('tok-push') } });
    t.ok(res.status === 200 && res.body.equals(o.data), `${o.name}: served intact from the bucket`);
  }
  t.equal(await served.stop(), 0);
});

t.test('encryption off with the keys: copies go plain with no data keys; turned on, a rerun seals them', async (t) => {
  const { url, env, dir } = plainTarget;
  const off = await migrate(['--to', url, '--objects', '--json'], { ...env, ...k1Env, SVC_ENCRYPTION: 'off' });
  t.equal(off.code, 0, off.stderr);
  const report = reportOf(off);
  t.same(report.problems, []);
  t.match(report.objects, { total: all.length, copied: all.length, refused: [], unreadable_in_bucket: [] }, 'every object decrypted and copied');
  t.match(dataKeysRow(report), { copied: 0, target_rows: 0, verified: true }, 'no data key in the target');
  t.equal(plaintextIn(dir).length, all.length, 'each copy is plain in the bucket (and the grep finds it)');

  const on = await migrate(['--to', url, '--objects', '--json'], { ...env, ...k1Env });
  t.equal(on.code, 0, on.stderr);
  t.match(reportOf(on), { verified: true, objects: { copied: all.length, already_in_bucket: 0 } }, 'the plain copies are written again, sealed');
  t.same(plaintextIn(join(dir, 'objects')), [], 'no plaintext under objects/');
  t.ok(plaintextIn(dir).every((f) => f.includes('/trash/')), 'the replaced plain versions are in trash/ only, for the nodes\' staging sweep');
});

t.test('a damaged encrypted copy on the disk is refused and reported; the others are copied', async (t) => {
  const small = sealed.find((o) => o.name === 'small')!;
  const oid = oidOf(small.data);
  const file = join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);
  const bytes = readFileSync(file);
  bytes[bytes.length >> 1]! ^= 0x40;
  writeFileSync(file, bytes);
  const { url, env } = await newTarget('damaged');
  const r = await migrate(['--to', url, '--objects', '--json'], { ...env, ...k1Env });
  t.equal(r.code, 1, 'exit 1: copied, not verified');
  t.match(reportOf(r), { verified: false, objects: { copied: all.length - 1, refused: [{ oid, reason: /damaged/ }], unreadable_in_bucket: [] } });
});

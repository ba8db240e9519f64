import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { basename, join } from 'node:path';
import t, { type Test } from 'tap';
import { pushableGame } from '../helpers/forge-emulator.js';
import { filesUnder, waitForChange, waitForDir } from '../helpers/fs-events.js';
import { basic, blob, http, type Blob } from '../helpers/lfs-http.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';

// kill -9 at several points while uploads of mixed sizes run concurrently, plain and with zstd:3.
// After each restart: every acknowledged object is served whole, nothing partial is visible, the
// staging area is empty, and no object file is left that no reference points to.

const { env } = await pushableGame(t);
const auth = { authorization: basic('tok') };

/** Journaled small objects, file-backed medium ones, and large ones (O_DIRECT, hash thread, frames). */
const SIZES = [700, 20_000, 64 << 10, 300_000, 1_100_000, 2_500_000, 9_000_000];

/**
 * When the server is killed: once the first large upload is staging; once the first file-backed
 * object is renamed into objects/ (its journal record and index row may not be written yet); after
 * some acknowledgements.
 */
type KillPoint = { readonly staging: true } | { readonly renamed: true } | { readonly acked: number };
const POINTS: KillPoint[] = [{ staging: true }, { renamed: true }, { acked: 2 }, { acked: 5 }];
/** Compression changes how files are written (frames, the pool), not the journal: its rounds stop there. */
const ROUNDS = { off: POINTS, 'zstd:3': POINTS.slice(0, 2) };
/** Objects above this size are written to files of their own (see SMALL_OBJECT_MAX). */
const FILE_BACKED = 1 << 20;

const objectsOn = (url: string, oid: string): string => `${url}/acme/game/objects/${oid}`;

/** Runs `blobs` as concurrent PUTs; `onAck` hears each 200. Settles once every request has ended. */
function uploadAll(server: RunningServer, blobs: Blob[], onAck: (b: Blob) => void): Promise<void> {
  return Promise.allSettled(
    blobs.map(async (b) => {
      const r = await http('PUT', objectsOn(server.url, b.oid), { headers: auth, body: b.data });
      if (r.status === 200) onAck(b);
    }),
  ).then(() => undefined);
}

/** Staging files in a data directory (the jobs' own folder aside). */
async function stagingFiles(dataDir: string): Promise<string[]> {
  return (await readdir(join(dataDir, 'staging'), { withFileTypes: true })).filter((e) => e.isFile()).map((e) => e.name);
}

/**
 * Kills the server with SIGKILL at `point`, while `blobs` upload; the ones acknowledged before it
 * died, and the staging files it left.
 */
async function killDuring(server: RunningServer, blobs: Blob[], point: KillPoint): Promise<{ acked: Set<Blob>; litter: string[] }> {
  const acked = new Set<Blob>();
  let reached: () => void = () => undefined;
  const ackPoint = new Promise<void>((r) => (reached = r));
  const uploads = uploadAll(server, blobs, (b) => {
    acked.add(b);
    if ('acked' in point && acked.size >= point.acked) reached();
  });
  const large = blobs.filter((b) => b.size >= 8 << 20).map((b) => b.oid);
  const files = blobs.filter((b) => b.size > FILE_BACKED).map((b) => join(server.dataDir, 'objects', b.oid.slice(0, 2), b.oid.slice(2, 4), b.oid));
  const watching = new AbortController();
  const trigger =
    'staging' in point
      ? waitForDir(join(server.dataDir, 'staging'), (names) => names.some((n) => large.some((oid) => n.startsWith(oid))), watching.signal)
      : 'renamed' in point
        ? waitForChange(join(server.dataDir, 'objects'), async () => (files.some((f) => existsSync(f)) ? true : null), { recursive: true, signal: watching.signal })
        : ackPoint;
  // If every upload ends before the point is reached, the kill comes after them: still a crash.
  await Promise.race([trigger, uploads]);
  watching.abort();
  trigger.catch(() => undefined);
  await server.stop('SIGKILL');
  await uploads;
  return { acked, litter: await stagingFiles(server.dataDir) };
}

/** Checks the restarted server against what the client heard; `litter`: staging files the killed one left. */
async function checkStore(t: Test, server: RunningServer, all: Blob[], acked: Set<Blob>, litter: string[]): Promise<Set<string>> {
  const served = new Set<string>();
  let lost = 0;
  let partial = 0;
  for (const b of all) {
    const r = await http('GET', objectsOn(server.url, b.oid), { headers: auth });
    if (r.status === 200) {
      if (r.body.equals(b.data)) served.add(b.oid);
      else partial++;
    } else if (acked.has(b)) lost++;
  }
  t.equal(lost, 0, `every acknowledged object is served (${acked.size} acknowledged)`);
  t.equal(partial, 0, 'nothing partial or wrong is served');
  // Only the dead process's files: the new one may be writing journaled objects to their own files.
  const staging = await stagingFiles(server.dataDir);
  t.same(staging.filter((name) => litter.includes(name)), [], `no staging file of the killed process is left (${litter.length} were)`);
  const files = (await filesUnder(join(server.dataDir, 'objects'))).map((p) => basename(p));
  t.same(files.filter((oid) => !served.has(oid)), [], 'no object file without a reference');
  return served;
}

for (const [compression, points] of Object.entries(ROUNDS)) {
  t.test(`kill -9 during concurrent uploads, compression ${compression}`, async (t) => {
    const dataDir = tmpDir();
    const senv = { ...env, SVC_COMPRESSION: compression };
    let server = await startServer(senv, { dataDir });
    t.teardown(() => server.stop());
    const all: Blob[] = [];
    const ackedEver = new Set<Blob>();
    for (const [round, point] of points.entries()) {
      const blobs = SIZES.map((s) => blob(s + round));
      all.push(...blobs);
      const { acked, litter } = await killDuring(server, blobs, point);
      for (const b of acked) ackedEver.add(b);
      if ('staging' in point) t.ok(litter.length > 0, 'killed while large uploads were staging');
      server = await startServer(senv, { dataDir });
      const served = await checkStore(t, server, all, ackedEver, litter);
      const swept = server.logs.filter((l) => /"msg":"(swept staging|removed object)/.test(l)).map((l) => l.replace(/^.*"msg":"([a-z ]{1,20}).*"count":(\d+).*$/, '$1…: $2'));
      t.comment(`round ${round + 1} (${JSON.stringify(point)}): ${ackedEver.size} acknowledged so far, ${served.size} served; at start ${swept.join(', ') || 'nothing to sweep'}`);
    }
    // The client retries what it never heard back about: every one of those is stored now.
    const retried = all.filter((b) => !ackedEver.has(b));
    await uploadAll(server, retried, (b) => ackedEver.add(b));
    t.equal(ackedEver.size, all.length, 'every retried upload is acknowledged');
    await checkStore(t, server, all, ackedEver, []);
  });
}

t.test('an object file left by a kill between its rename and its record is removed at start', async (t) => {
  const dataDir = tmpDir();
  const kept = blob(50_000);
  const server = await startServer(env, { dataDir });
  t.equal((await http('PUT', objectsOn(server.url, kept.oid), { headers: auth, body: kept.data })).status, 200);
  t.equal(await server.stop('SIGKILL'), null, 'killed');
  // What such a kill leaves: the complete, renamed file, and neither a journal record nor a row.
  const orphan = blob(3_000_000);
  mkdirSync(join(dataDir, 'objects', orphan.oid.slice(0, 2), orphan.oid.slice(2, 4)), { recursive: true });
  writeFileSync(join(dataDir, 'objects', orphan.oid.slice(0, 2), orphan.oid.slice(2, 4), orphan.oid), orphan.data);
  // And a staging file younger than any age limit: its writer is dead all the same.
  const litter = `${orphan.oid}.0123456789abcdef.part`;
  writeFileSync(join(dataDir, 'staging', litter), orphan.data.subarray(0, 1000));
  const again = await startServer(env, { dataDir });
  t.teardown(() => again.stop());
  t.match(again.logs.join('\n'), /removed object files no reference points to[^\n]*"count":1,"bytes":3000000/);
  const served = await checkStore(t, again, [kept, orphan], new Set([kept]), [litter]);
  t.same([...served], [kept.oid], 'the orphan is gone, the acknowledged object stays');
});

t.test('an index that knows no object at all keeps the files it does not know', async (t) => {
  const dataDir = tmpDir();
  const stray = blob(10_000);
  mkdirSync(join(dataDir, 'objects', stray.oid.slice(0, 2), stray.oid.slice(2, 4)), { recursive: true });
  const path = join(dataDir, 'objects', stray.oid.slice(0, 2), stray.oid.slice(2, 4), stray.oid);
  writeFileSync(path, stray.data);
  const server = await startServer(env, { dataDir });
  t.teardown(() => server.stop());
  t.match(server.logs.join('\n'), /the index is empty: left in place/);
  t.same(await filesUnder(join(dataDir, 'objects')), [join(stray.oid.slice(0, 2), stray.oid.slice(2, 4), stray.oid)], 'the file is kept');
});

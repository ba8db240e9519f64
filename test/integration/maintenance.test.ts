import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, statSync, utimesSync, writeFileSync, copyFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join, sep } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, http, schemaErrors } from '../helpers/lfs-http.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';
import { waitFor } from '../helpers/wait-for.js';
import { flipByte, textLike } from '../helpers/data.js';

// Maintenance against the real server, on the disk store and on the S3 store (a real S3-protocol
// server on loopback): audit (raw, framed, legacy; quarantine and healing), compress (dry run and
// real), retain (grace, shared objects, in-flight uploads; bytes deleted only when no repository
// references them), dedupe (a copied legacy folder with one bad file; disk only: a bucket has no
// legacy layout) and the job progress endpoint.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
for (const r of ['acme/game', 'acme/other', 'acme/legacy', 'acme/packed', 'acme/old']) forge.repos.set(r, { private: true });
const all = (role: 'admin' | 'push' | 'pull') => ({ 'acme/game': role, 'acme/other': role, 'acme/legacy': role, 'acme/packed': role, 'acme/old': role });
forge.tokens.set('tok-admin', { login: 'boss', repos: all('admin') });
forge.tokens.set('tok-push', { login: 'dev', repos: all('push') });
forge.tokens.set('tok-pull', { login: 'viewer', repos: all('pull') });
forge.tokens.set('tok-site', { login: 'root', siteAdmin: true, repos: all('admin') });
const as = (tok: string) => ({ authorization: basic(tok) });
const MiB = 1 << 20;
const oidOf = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Every file under `root` (recursively) whose name is `oid` or begins with it. */
function filesNamed(root: string, oid: string): string[] {
  if (!existsSync(root)) return [];
  return readdirSync(root, { recursive: true })
    .map(String)
    .filter((rel) => rel.split(sep).pop()!.startsWith(oid))
    .map((rel) => join(root, rel));
}


for (const backend of ['disk', 's3'] as const) {
  t.test(`maintenance on the ${backend} store`, async (t) => {
    const dataDir = tmpDir();
    const s3 = backend === 's3' ? await startS3Server(tmpDir('stowage-maint-s3-')) : null;
    if (s3 !== null) t.teardown(() => s3.stop());
    const storeEnv = (prefix: string): Record<string, string> => (s3 === null ? {} : s3.env({ SVC_S3_PREFIX: prefix }));
    // A grace far longer than any test runs: what is within it is so whatever the machine's speed;
    // past it is a restart with no grace (withGrace), never a wait.
    const env = { ...storeEnv('lfs'), SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'zstd:3', SVC_GC_GRACE: '30m', SVC_WORKERS: '2' };
    let server = await startServer(env, { dataDir });
    t.teardown(() => server.stop());
    /** The same data directory (and bucket) served again with SVC_GC_GRACE set to `grace`. */
    const withGrace = async (grace: string): Promise<void> => {
      await server.stop();
      server = await startServer({ ...env, SVC_GC_GRACE: grace }, { dataDir });
    };
    t.teardown(() => {
      if (!t.passing()) t.comment(server.logs.filter((l) => !l.includes('"msg":"request"')).join('\n'));
    });
    /** Where the store keeps an object's bytes: a file under objects/, or s3rver's file for the bucket key. */
    const storeRoot = (prefix: string, dir: string): string => (s3 === null ? dir : join(s3.dir, s3.bucket, prefix));
    const stored = (oid: string, area: 'objects' | 'quarantine' = 'objects', root = storeRoot('lfs', dataDir)): string | null =>
      filesNamed(join(root, area), oid).find((f) => !f.endsWith('.json') && !f.endsWith('.md5')) ?? null;
    const pathOf = (oid: string): string => {
      const f = stored(oid);
      if (f === null) throw new Error(`${oid} is not in the store`);
      return f;
    };

    async function put(repo: string, data: Buffer, tok = 'tok-push', on: RunningServer = server): Promise<string> {
      const oid = oidOf(data);
      const res = await http('PUT', `${on.url}/${repo}/objects/${oid}`, { headers: as(tok), body: data });
      if (res.status !== 200) throw new Error(`PUT ${res.status} ${res.body}`);
      return oid;
    }
    const get = (repo: string, oid: string, tok = 'tok-pull', on: RunningServer = server) => http('GET', `${on.url}/${repo}/objects/${oid}`, { headers: as(tok) });
    async function batch(repo: string, operation: 'upload' | 'download', objs: { oid: string; size: number }[]): Promise<any> {
      const res = await http('POST', `${server.url}/${repo}/objects/batch`, {
        headers: { ...as('tok-push'), 'content-type': LFS, accept: LFS },
        body: JSON.stringify({ operation, objects: objs }),
      });
      if (res.status !== 200) throw new Error(`batch ${res.status} ${res.body}`);
      const body = res.json();
      const err = schemaErrors('http-batch-response-schema.json', body);
      if (err !== null) throw new Error(`batch response off schema: ${err}`);
      return body;
    }
    /** A PUT whose first MiB is sent; finish() sends the rest and resolves with the status. */
    function slowPut(repo: string, data: Buffer): { finish(): Promise<number> } {
      const req = httpRequest(`${server.url}/${repo}/objects/${oidOf(data)}`, {
        method: 'PUT',
        headers: { ...as('tok-push'), 'content-length': String(data.length) },
      });
      const done = new Promise<number>((resolve, reject) => {
        req.on('response', (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', reject);
      });
      req.write(data.subarray(0, MiB));
      return {
        finish() {
          req.end(data.subarray(MiB));
          return done;
        },
      };
    }
    /** Dry runs of retain until one counts an upload in flight (the server has begun the PUT): that report. */
    const inFlightOnce = (repo: string, oids: string[]): Promise<any> =>
      waitFor(async () => {
        const r = (await job(repo, 'retain', { oids, dry_run: true }, 'tok-push')).json();
        return r.in_flight === 1 ? r : null;
      }, 'an upload to be in flight');
    const jobOn = (on: RunningServer, repo: string, kind: string, body: object, tok = 'tok-admin') =>
      http('POST', `${on.url}/${repo}/objects/${kind}`, { headers: { ...as(tok), 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const job = (repo: string, kind: string, body: object, tok = 'tok-admin') => jobOn(server, repo, kind, body, tok);

    t.test('audit: raw and framed objects pass; a planted bad byte is found, quarantined by admin, healed by the next upload', async (t) => {
      const text = textLike(9 * MiB + 333, 1); // framed (compression on)
      const noise = randomBytes(3 * MiB + 5); // stored plain: zstd saves nothing
      const textOid = await put('acme/game', text);
      const noiseOid = await put('acme/game', noise);
      t.ok(statSync(pathOf(textOid)).size < text.length / 2, 'text object is stored framed');
      t.equal(statSync(pathOf(noiseOid)).size, noise.length, 'random object is stored plain');

      t.equal((await job('acme/game', 'audit', {}, 'tok-pull')).status, 403, 'an audit needs push: a reader runs none');
      const clean = await job('acme/game', 'audit', {}, 'tok-push');
      t.equal(clean.status, 200);
      const r0 = clean.json();
      t.match(r0, { objects: 2, ok: 2, corrupt: 0, unreadable: 0, complete: true, quarantine: 'not_needed' });
      t.equal(r0.bytes, text.length + noise.length, 'every byte read back');

      // One flipped byte in each: the plain one reads but does not match; the framed one cannot be read.
      flipByte(pathOf(noiseOid), 12345, 0xff);
      flipByte(pathOf(textOid), 100, 0xff);
      const seen = (await job('acme/game', 'audit', {}, 'tok-push')).json();
      t.match(seen, { corrupt: 1, unreadable: 1, complete: true, quarantined: 0, quarantine: 'not_requested' }, 'push runs the audit read-only');
      t.equal(seen.corrupt_objects[0].oid, noiseOid);
      t.equal(seen.unreadable_objects[0].oid, textOid);
      // Read-only by default for an admin too (restic's `check`): quarantine only when asked.
      const adminDefault = (await job('acme/game', 'audit', {}, 'tok-admin')).json();
      t.match(adminDefault, { corrupt: 1, unreadable: 1, quarantined: 0, quarantine: 'not_requested', state: 'done', outcome: 'problems' }, "an admin's audit is read-only unless asked");
      const asked = await job('acme/game', 'audit', { quarantine: true }, 'tok-push');
      t.equal(asked.status, 403, 'quarantine asked without admin is refused, not silently run read-only');
      let b = await batch('acme/game', 'upload', [{ oid: noiseOid, size: noise.length }]);
      t.notOk(b.objects[0].actions, 'not quarantined yet: batch still says present');

      const granted = await batch('acme/game', 'download', [{ oid: noiseOid, size: noise.length }]);
      t.ok(granted.objects[0].actions?.download, 'a download granted just before the quarantine');
      const fixed = (await job('acme/game', 'audit', { quarantine: true }, 'tok-admin')).json();
      t.match(fixed, { corrupt: 1, unreadable: 1, quarantined: 2, quarantine: 'applied' });
      t.equal(stored(noiseOid), null, 'bad bytes moved out of the store');
      t.ok(stored(noiseOid, 'quarantine') && stored(textOid, 'quarantine'), 'and kept under quarantine/ for inspection');
      b = await batch('acme/game', 'upload', [{ oid: noiseOid, size: noise.length }, { oid: textOid, size: text.length }]);
      t.ok(b.objects[0].actions?.upload && b.objects[1].actions?.upload, 'batch reports both missing, so the client uploads them again');
      t.equal((await get('acme/game', noiseOid)).status, 404, 'a quarantined object is never served, not even to the download granted before');
      const stats = (await http('GET', `${server.url}/acme/game/objects/stats`, { headers: as('tok-pull') })).json();
      t.match(JSON.stringify(stats), /corrupt/, 'the repository page shows the last audit');

      await put('acme/game', noise);
      await put('acme/game', text);
      t.ok((await get('acme/game', noiseOid)).body.equals(noise), 'healed: good bytes served');
      t.ok((await get('acme/game', textOid)).body.equals(text), 'healed: framed object served');
      const again = (await job('acme/game', 'audit', {}, 'tok-push')).json();
      t.match(again, { objects: 2, ok: 2, corrupt: 0, unreadable: 0, complete: true, already_quarantined: 0 });
      t.equal((await job('acme/game', 'audit', {}, 'tok-none')).status, 401, 'an unknown token is refused');
    });

    t.test('compress: a dry run reports the real saving and writes nothing; the real run verifies and rewrites', async (t) => {
      // Objects stored plain: a server with compression off for new uploads, where compress still
      // frames at level 3 and the framed objects must still be served.
      const plainDir = tmpDir();
      const plain = await startServer({ ...storeEnv('plain'), SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'off', SVC_WORKERS: '2' }, { dataDir: plainDir });
      t.teardown(() => plain.stop());
      const text = textLike(6 * MiB + 77, 2);
      const noise = randomBytes(2 * MiB);
      const noiseOid = await put('acme/packed', noise, 'tok-push', plain);
      const textOid = await put('acme/packed', text, 'tok-push', plain);
      const rotten = textLike(3 * MiB + 5, 3);
      const rottenOid = await put('acme/packed', rotten, 'tok-push', plain);
      const pathOf = (oid: string): string => stored(oid, 'objects', storeRoot('plain', plainDir))!;
      const job = (repo: string, kind: string, body: object, tok = 'tok-admin') => jobOn(plain, repo, kind, body, tok);
      t.equal(statSync(pathOf(textOid)).size, text.length, 'stored plain before compress');
      // Bit rot in a stored plain object: compress reads it through the store and verifies it on the way.
      flipByte(pathOf(rottenOid), 4321, 0xff);

      t.equal((await job('acme/packed', 'compress', { dry_run: true }, 'tok-push')).status, 403, 'compress needs admin');
      const dry = (await job('acme/packed', 'compress', { dry_run: true })).json();
      t.match(dry, { dry_run: true, compressed: 1, not_smaller: 1, refused: 1, refused_objects: [rottenOid], complete: true, outcome: 'problems' });
      t.ok(dry.saved > text.length / 2, `dry run reports the real saving (${dry.saved} bytes)`);
      t.equal(statSync(pathOf(textOid)).size, text.length, 'dry run wrote nothing');

      const real = (await job('acme/packed', 'compress', {})).json();
      t.match(real, { dry_run: false, compressed: 1, not_smaller: 1, refused: 1 });
      t.equal(statSync(pathOf(rottenOid)).size, rotten.length, 'the object that does not hash to its oid is left as it was');
      t.equal(statSync(pathOf(noiseOid)).size, noise.length, 'random data is left plain: framing would not make it smaller');
      t.equal(real.saved, dry.saved, 'the real saving is the one the dry run reported');
      t.equal(statSync(pathOf(textOid)).size, text.length - real.saved, 'file rewritten in framed form');
      t.ok((await get('acme/packed', textOid, 'tok-pull', plain)).body.equals(text), 'framed object downloads byte for byte');
      t.ok((await get('acme/packed', noiseOid, 'tok-pull', plain)).body.equals(noise));
      const twice = (await job('acme/packed', 'compress', {})).json();
      t.match(twice, { compressed: 0, already_compressed: 1 }, 'running it twice is harmless');
      t.match((await job('acme/packed', 'audit', {})).json(), { ok: 2, corrupt: 1, unreadable: 0, corrupt_objects: [{ oid: rottenOid }] }, 'the audit finds the rotten one');
    });

    t.test('retain: grace, shared objects, in-flight uploads', async (t) => {
      const keep = randomBytes(2 * MiB);
      const drop = randomBytes(2 * MiB + 1);
      const shared = randomBytes(2 * MiB + 2);
      const keepOid = await put('acme/other', keep);
      const dropOid = await put('acme/other', drop);
      const sharedOid = await put('acme/other', shared);
      await put('acme/game', shared);

      t.equal((await job('acme/other', 'retain', { oids: [keepOid] }, 'tok-pull')).status, 403, 'retain needs push');
      t.equal((await job('acme/other', 'retain', { oids: ['nope'] }, 'tok-push')).status, 422, 'a bad oid is refused before anything runs');
      const early = (await job('acme/other', 'retain', { oids: [keepOid] }, 'tok-push')).json();
      t.match(early, { swept: 0, bytes: 0, within_grace: 2, dry_run: false }, 'nothing is taken within the grace');
      const last = (await job('acme/game', 'retain', { oids: [], dry_run: true }, 'tok-push')).json();
      t.ok(last.within_grace >= 1, 'an empty list is legitimate and still subject to the grace');

      await withGrace('0s'); // everything is past the grace from here on
      // An upload of the dropped oid in flight (to another repository): retain must leave its bytes alone.
      const slow = slowPut('acme/game', drop);
      const dry = await inFlightOnce('acme/other', [keepOid]);
      // `bytes` is what this repository stops referencing, each object in full: whether another
      // repository holds it is never told (docs/behaviour.md).
      t.match(dry, { swept: 1, in_flight: 1, dry_run: true, bytes: shared.length }, 'dry run: the shared object would be unreferenced here, counted in full');
      t.equal(await slow.finish(), 200, 'the in-flight upload completes');

      // A client's download batch just before: its grant (service/download-grants.ts) must not outlive the reference.
      const granted = await batch('acme/other', 'download', [{ oid: dropOid, size: drop.length }]);
      t.ok(granted.objects[0].actions?.download, 'the download was granted before retain ran');
      const real = (await job('acme/other', 'retain', { oids: [keepOid] }, 'tok-push')).json();
      t.match(real, { swept: 2, bytes: drop.length + shared.length, dry_run: false }, 'both references dropped, each counted in full though other repositories still hold both');
      t.ok(existsSync(pathOf(sharedOid)) && existsSync(pathOf(dropOid)), 'bytes another repository references stay');
      t.equal((await get('acme/other', dropOid)).status, 404, 'dropped from this repository, though a batch granted its download a moment before');
      t.ok((await get('acme/game', sharedOid)).body.equals(shared), 'still served to the other repository');
      t.ok((await get('acme/other', keepOid)).body.equals(keep), 'kept object still served');

      const gameRows = (await job('acme/game', 'retain', { oids: [], dry_run: true }, 'tok-push')).json();
      t.ok(gameRows.bytes >= shared.length + drop.length, 'dry run counts the references it would drop');
      t.ok(existsSync(pathOf(sharedOid)), 'dry run deleted nothing');

      // The real run, while the shared object is being uploaded to acme/other again: its bytes stay
      // (in flight), the dropped object's bytes go (no repository references it any more).
      const again = slowPut('acme/other', shared);
      const seen = await inFlightOnce('acme/game', []);
      t.ok(seen.bytes >= drop.length, 'the dry run counts only what no upload is writing');
      const gone = (await job('acme/game', 'retain', { oids: [] }, 'tok-push')).json();
      t.match(gone, { in_flight: 1, dry_run: false, complete: true });
      t.ok(gone.bytes >= drop.length, 'the dropped references are reported');
      t.equal(stored(dropOid), null, 'bytes no repository references are deleted from the store');
      t.ok(stored(sharedOid), 'bytes an upload in flight is writing stay');
      t.equal(await again.finish(), 200);
      t.ok((await get('acme/other', sharedOid)).body.equals(shared), 'and are served once it completes');
      t.equal((await get('acme/game', dropOid)).status, 404);
      await withGrace(env.SVC_GC_GRACE);
    });

    if (backend === 'disk') {
      t.test('dedupe: a copied legacy folder with one bad file; served until folded', async (t) => {
        const good = [randomBytes(2 * MiB), textLike(3 * MiB, 9), randomBytes(1500)];
        const alreadyShared = randomBytes(2 * MiB + 7); // not MiB + 7: see the BodyPump note in the report
        await put('acme/game', alreadyShared); // the shared store holds this one already
        const bad = randomBytes(MiB);
        const badName = oidOf(randomBytes(32)); // a name its content does not hash to
        const src = tmpDir('legacy-src-');
        const files: [string, Buffer][] = [...good.map((d) => [oidOf(d), d] as [string, Buffer]), [oidOf(alreadyShared), alreadyShared], [badName, bad]];
        for (const [oid, data] of files) {
          mkdirSync(join(src, oid.slice(0, 2), oid.slice(2, 4)), { recursive: true });
          writeFileSync(join(src, oid.slice(0, 2), oid.slice(2, 4), oid), data);
        }
        // The operator copies another server's folder into place.
        for (const [oid] of files) {
          const dir = join(dataDir, 'repos', 'acme', 'legacy', oid.slice(0, 2), oid.slice(2, 4));
          mkdirSync(dir, { recursive: true });
          copyFileSync(join(src, oid.slice(0, 2), oid.slice(2, 4), oid), join(dir, oid));
        }
        const before = await batch('acme/legacy', 'download', good.map((d) => ({ oid: oidOf(d), size: d.length })));
        t.ok(before.objects.every((o: any) => o.actions?.download), 'legacy objects are present to batch before dedupe');
        const served = await get('acme/legacy', oidOf(good[1]!));
        t.ok(served.body.equals(good[1]!), 'and served');
        t.equal((await job('acme/legacy', 'audit', { quarantine: false })).json().corrupt, 1, 'audit covers legacy files too');

        t.equal((await job('acme/legacy', 'dedupe', {}, 'tok-push')).status, 403, 'dedupe needs admin');
        const r = (await job('acme/legacy', 'dedupe', {})).json();
        t.match(r, { objects: 5, folded: 4, moved: 3, already_shared: 1, refused: 1, unreadable: 0, complete: true });
        t.equal(r.bytes_freed, alreadyShared.length);
        t.same(r.refused_objects, [badName]);
        t.equal(stored(badName), null, 'the bad file never entered the shared store');
        for (const d of good) {
          t.ok(existsSync(pathOf(oidOf(d))), 'folded into the shared store');
          t.ok((await get('acme/legacy', oidOf(d))).body.equals(d), 'served from the shared store');
        }
        const legacyLeft = readdirSync(join(dataDir, 'repos', 'acme', 'legacy'), { recursive: true }).filter((n) => String(n).length > 60);
        t.same(legacyLeft.map((n) => String(n).split('/').pop()), [`${badName}.refused`], 'only the refused file is left, set aside');
        const b = await batch('acme/legacy', 'download', [{ oid: badName, size: bad.length }]);
        t.equal(b.objects[0].error?.code, 404, 'the refused object is not served');
        t.match((await job('acme/legacy', 'dedupe', {})).json(), { objects: 0, folded: 0 }, 'a second run finds nothing to do');
        t.match((await job('acme/legacy', 'audit', {})).json(), { objects: 4, ok: 4, corrupt: 0, unreadable: 0, complete: true });
      });

      t.test('retain on legacy-layout files: old unnamed files go, fresh ones are within the grace', async (t) => {
        const old = randomBytes(5000);
        const fresh = randomBytes(6000);
        const named = randomBytes(7000);
        const place = (d: Buffer): string => {
          const oid = oidOf(d);
          const dir = join(dataDir, 'repos', 'acme', 'old', oid.slice(0, 2), oid.slice(2, 4));
          mkdirSync(dir, { recursive: true });
          writeFileSync(join(dir, oid), d);
          return join(dir, oid);
        };
        const oldPath = place(old);
        const freshPath = place(fresh);
        const namedPath = place(named);
        const past = new Date(Date.now() - 3600_000);
        utimesSync(oldPath, past, past);
        utimesSync(namedPath, past, past);
        const keepShared = readdirSync(join(dataDir, 'objects'), { recursive: true }).length; // unchanged below
        const r = (await job('acme/old', 'retain', { oids: [oidOf(named)] }, 'tok-push')).json();
        t.match(r, { swept: 1, bytes: old.length, dry_run: false });
        t.ok(r.within_grace >= 1, 'the fresh legacy file is within the grace');
        t.notOk(existsSync(oldPath), 'the old unnamed legacy file is removed');
        t.ok(existsSync(freshPath) && existsSync(namedPath), 'fresh and named files stay');
        t.equal(readdirSync(join(dataDir, 'objects'), { recursive: true }).length, keepShared, 'the shared store is untouched');
        t.ok((await get('acme/old', oidOf(named))).body.equals(named), 'a kept legacy object is still served');
      });
    } else {
      t.test('dedupe on a bucket: no legacy layout, so an empty folder is reported', async (t) => {
        t.equal((await job('acme/legacy', 'dedupe', {}, 'tok-push')).status, 403, 'dedupe needs admin here too');
        const r = await job('acme/legacy', 'dedupe', {});
        t.equal(r.status, 200, 'the route answers on every backend');
        t.match(r.json(), { objects: 0, folded: 0, refused: 0, complete: true, state: 'done', outcome: 'clean' });
      });
    }

    t.test('wait:false answers 202 with a job whose progress can be read', async (t) => {
      for (let i = 0; i < 4; i++) await put('acme/game', randomBytes(2 * MiB + i));
      const res = await job('acme/game', 'audit', { wait: false }, 'tok-push');
      t.equal(res.status, 202);
      const started = res.json();
      t.match(started, { kind: 'audit', repository: 'acme/game' });
      t.equal(res.headers.location, `/acme/game/objects/jobs/${started.id}`);
      const view = await waitFor(async () => {
        const v = (await http('GET', `${server.url}${started.href}`, { headers: as('tok-pull') })).json();
        return v.state !== 'queued' && v.state !== 'running' ? v : null;
      }, 'the audit job to end');
      t.equal(view.state, 'done');
      t.equal(view.objects_done, view.objects_total, 'progress reaches the total');
      t.equal(view.bytes_done, view.bytes_total);
      t.equal(view.report.complete, true);
      t.equal((await http('GET', `${server.url}/acme/other/objects/jobs/${started.id}`, { headers: as('tok-pull') })).status, 404, "another repository's job is not visible");
      const overview = await http('GET', `${server.url}/-/api/overview`, { headers: as('tok-site') });
      t.equal(overview.status, 200);
      t.ok(overview.json().jobs.recent.some((j: any) => j.id === started.id), 'the dashboard lists the job');
      t.equal(overview.json().workers.threads, 4, 'the dashboard shows both pools (2 transfer + 2 maintenance threads)');
    });

    t.test('a job survives a client that hangs up', async (t) => {
      for (let i = 0; i < 6; i++) await put('acme/packed', randomBytes(24 * MiB + i));
      const before = Date.now();
      const mark = server.logs.length;
      const ac = new AbortController();
      const hungUp = fetch(`${server.url}/acme/packed/objects/audit`, {
        method: 'POST',
        headers: { ...as('tok-push'), 'content-type': 'application/json' },
        body: '{}',
        signal: ac.signal,
      }).catch((e: Error) => e.name);
      // Hang up as soon as the job runs (its log line); the 144 MiB it hashes outlast that by far.
      const running = await server.waitForLog((ev) => ev.msg === 'job started' && ev.kind === 'audit' && ev.repo === 'acme/packed', 'the audit starting', mark);
      ac.abort();
      t.equal(await hungUp, 'AbortError', 'the client went away before the answer');
      await server.waitForLog((ev) => ev.msg === 'job finished' && ev.job === running.job, 'the audit ending', mark);
      const recent = (await http('GET', `${server.url}/-/api/overview`, { headers: as('tok-site') })).json().jobs;
      const found = [...recent.running, ...recent.recent].find((j: any) => j.kind === 'audit' && j.repository === 'acme/packed' && Date.parse(j.started_at) >= before - 5);
      t.equal(found?.state, 'done', 'the job ran to the end anyway');
      const detail = (await http('GET', `${server.url}/acme/packed/objects/jobs/${found.id}`, { headers: as('tok-pull') })).json();
      t.match(detail.report, { complete: true, corrupt: 0, unreadable: 0 }, 'and its report can be read by id');
      t.equal(detail.objects_total, 6, 'every object of the repository was counted');
    });
  });
}

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, http } from '../helpers/lfs-http.js';
import { startS3Server } from '../helpers/s3-server.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';

// kill -9 of the server in the middle of dedupe, compress and retain: after a restart the
// interrupted job is reported as such, running it again finishes it, and a full audit finds nothing
// lost and nothing corrupt. On the disk store and on the S3 store (dedupe: disk only, a bucket has
// no legacy layout; there the objects are uploaded instead).

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/crash', { private: true });
forge.tokens.set('tok-admin', { login: 'boss', repos: { 'acme/crash': 'admin' } });
const auth = { authorization: basic('tok-admin') };

const COUNT = 40;
const oidOf = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
function textLike(size: number, seed: number): Buffer {
  const out = Buffer.alloc(size);
  let at = 0;
  for (let i = 0; at < size; i++) at += out.write(`v ${seed} ${i * 0.25} ${(i * seed) % 977} // vertex ${i}\n`, at);
  return out;
}
const blobs = Array.from({ length: COUNT }, (_, i) => textLike(2 * (1 << 20) + i, i + 1));
const oids = blobs.map(oidOf);

for (const backend of ['disk', 's3'] as const) {
  t.test(`on the ${backend} store`, async (t) => {
    const dataDir = tmpDir();
    const s3 = backend === 's3' ? await startS3Server(tmpDir('stowage-crash-s3-')) : null;
    if (s3 !== null) t.teardown(() => s3.stop());
    const env = { ...(s3?.env() ?? {}), SVC_FORGE_A_API_URL: forge.url, SVC_COMPRESSION: 'off', SVC_GC_GRACE: '0s', SVC_WORKERS: '2' };
    let server: RunningServer = await startServer(env, { dataDir });
    t.teardown(() => server.stop('SIGKILL'));
    /** Where the store keeps an object's bytes: its file under objects/, or s3rver's file for its bucket key. */
    const pathOf = (oid: string): string =>
      s3 === null ? join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid) : join(s3.dir, s3.bucket, 'lfs', 'objects', oid.slice(0, 2), oid.slice(2, 4), `${oid}._S3rver_object`);

    const post = (kind: string, body: object) =>
      http('POST', `${server.url}/acme/crash/objects/${kind}`, { headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });

    /** Starts a job without waiting, then SIGKILLs the server once it has done `after` objects; restarts it. */
    async function killDuring(kind: string, body: object, after: number): Promise<{ id: string; doneAtKill: number; total: number | null }> {
      const res = await post(kind, { ...body, wait: false });
      if (res.status !== 202) throw new Error(`${kind}: ${res.status} ${res.body}`);
      const { id, href } = res.json();
      let seen = { objects_done: 0, objects_total: null as number | null, state: 'queued' };
      for (let i = 0; i < 5000; i++) {
        seen = (await http('GET', `${server.url}${href}`, { headers: auth })).json();
        if (seen.objects_done >= after || seen.state !== 'running' && seen.state !== 'queued') break;
      }
      await server.stop('SIGKILL');
      server = await startServer(env, { dataDir });
      return { id, doneAtKill: seen.objects_done, total: seen.objects_total };
    }

    async function jobState(id: string): Promise<string> {
      return (await http('GET', `${server.url}/acme/crash/objects/jobs/${id}`, { headers: auth })).json().state;
    }

    async function everythingIntact(t: any, expected: number[]): Promise<void> {
      const audit = (await post('audit', {})).json();
      t.match(audit, { objects: expected.length, ok: expected.length, corrupt: 0, unreadable: 0, complete: true }, 'full audit: nothing lost, nothing corrupt');
      for (const i of expected) {
        const r = await http('GET', `${server.url}/acme/crash/objects/${oids[i]}`, { headers: auth });
        if (r.status !== 200 || !r.body.equals(blobs[i]!)) {
          t.fail(`object ${i} is not served intact (${r.status})`);
          return;
        }
      }
      t.pass(`all ${expected.length} objects download byte for byte`);
    }

    if (backend === 'disk') t.test('kill -9 during dedupe, then again', async (t) => {
      blobs.forEach((b, i) => {
        const dir = join(dataDir, 'repos', 'acme', 'crash', oids[i]!.slice(0, 2), oids[i]!.slice(2, 4));
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, oids[i]!), b);
      });
      const k = await killDuring('dedupe', {}, 3);
      t.comment(`killed after ${k.doneAtKill} of ${k.total} objects`);
      t.equal(await jobState(k.id), 'interrupted', 'the killed job is reported interrupted after the restart');
      const again = (await post('dedupe', {})).json();
      t.equal(again.refused, 0);
      t.equal(again.complete, true);
      t.equal(again.folded, again.objects, 'the rerun folds what was left');
      t.ok(oids.every((o) => existsSync(pathOf(o))), 'every object is in the shared store');
      await everythingIntact(t, blobs.map((_, i) => i));
    });

    if (backend === 's3') {
      t.test('the objects, uploaded into the bucket', async (t) => {
        for (const [i, b] of blobs.entries()) {
          const r = await http('PUT', `${server.url}/acme/crash/objects/${oids[i]}`, { headers: auth, body: b });
          if (r.status !== 200) t.fail(`upload ${i}: ${r.status}`);
        }
        t.ok(oids.every((o) => existsSync(pathOf(o))), 'every object is in the bucket');
      });
    }

    t.test('kill -9 during compress, then again', async (t) => {
      const k = await killDuring('compress', {}, 3);
      t.comment(`killed after ${k.doneAtKill} of ${k.total} objects`);
      t.equal(await jobState(k.id), 'interrupted');
      const again = (await post('compress', {})).json();
      t.equal(again.refused, 0);
      t.equal(again.compressed + again.already_compressed, COUNT, 'every object ends up framed');
      t.ok(again.already_compressed >= 1 || k.doneAtKill === 0, 'the killed run kept what it had finished');
      await everythingIntact(t, blobs.map((_, i) => i));
    });

    t.test('kill -9 during retain, then again', async (t) => {
      const keep = oids.slice(0, 10);
      const k = await killDuring('retain', { oids: keep }, 1);
      t.comment(`killed after ${k.doneAtKill} of ${k.total} objects`);
      t.ok(['interrupted', 'done'].includes(await jobState(k.id)), 'the job is interrupted (or had finished before the kill landed)');
      const again = (await post('retain', { oids: keep })).json();
      t.equal(again.complete, true);
      t.equal(again.kept, 10);
      for (let i = 10; i < COUNT; i++) {
        if (existsSync(pathOf(oids[i]!))) t.fail(`object ${i} should have been removed`);
      }
      t.pass('the 30 unnamed objects are gone from the store');
      const gone = await http('GET', `${server.url}/acme/crash/objects/${oids[20]}`, { headers: auth });
      t.equal(gone.status, 404);
      await everythingIntact(t, Array.from({ length: 10 }, (_, i) => i));
    });
  });
}

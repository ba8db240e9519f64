import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmdirSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, LFS, type Blob } from '../helpers/lfs-http.js';
import { rawHead, rawRequest } from '../helpers/raw-http.js';
import { startServer } from '../helpers/start-server.js';

// A disk filled by uploads alone (no outside filler): the server stops taking new object bytes while
// SVC_DISK_RESERVE is still free, so what frees space (retain) and what the index needs (locks) keep
// working, and uploads resume once retain freed room, without a restart. Mounting needs root.
const mountPoint = mkdtempSync(join(tmpdir(), 'stowage-reserve-'));
const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', mountPoint]).status === 0;
if (!mounted) {
  rmdirSync(mountPoint);
  t.test('disk-reserve faults', { skip: 'needs permission to mount a tmpfs (run as root)' }, () => undefined);
} else {
  t.teardown(() => {
    spawnSync('umount', [mountPoint]);
    rmdirSync(mountPoint);
  });
  const free = (): number => {
    const { bavail, bsize } = statfsSync(mountPoint);
    return bavail * bsize;
  };
  const RESERVE = 24 << 20;

  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set('acme/ci', { private: true });
  forge.repos.set('acme/game', { private: true });
  forge.tokens.set('tok', { login: 'w', repos: { 'acme/ci': 'push', 'acme/game': 'push' } });
  forge.tokens.set('tok-root', { login: 'root', siteAdmin: true, repos: {} });

  t.test('uploads stop at the reserve; a lock and a sign-in still work, retain frees space, uploads resume without a restart', async (t) => {
    const dataDir = join(mountPoint, 'data');
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
    const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_GC_GRACE: '0', SVC_DISK_RESERVE: String(RESERVE) }, { dataDir, keepData: true });
    t.teardown(() => server.stop());
    const auth = { authorization: basic('tok') };
    /** Batch then PUT; the batch entry's own error code when it refuses the object. */
    const upload = async (repo: string, b: Blob): Promise<number> => {
      const answer = await batch(server.url, repo, 'tok', 'upload', [{ oid: b.oid, size: b.size }]);
      if (answer.status !== 200) return answer.status;
      const obj = answer.json().objects[0];
      if (obj.error !== undefined) return obj.error.code;
      const put = await http('PUT', obj.actions.upload.href, { headers: { ...auth, 'content-type': 'application/octet-stream', ...(obj.actions.upload.header ?? {}) }, body: b.data });
      return put.status;
    };
    const gauge = async (name: string): Promise<number | null> => {
      const text = (await http('GET', `${server.url}/metrics`)).body.toString();
      const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
      return m === null ? null : Number(m[1]);
    };

    const acknowledged: Blob[] = [];
    for (const size of [64 << 10, 300 << 10, 2 << 20]) {
      const b = blob(size);
      t.equal(await upload('acme/game', b), 200, `${size} bytes stored in acme/game`);
      acknowledged.push(b);
    }

    // acme/ci's uploads fill the disk: large ones until refused, then ever smaller ones.
    let ciStored = 0;
    let lastRefusal = 0;
    for (const size of [4 << 20, 512 << 10, 64 << 10, 4 << 10]) {
      for (let i = 0; i < 200; i++) {
        const status = await upload('acme/ci', blob(size));
        if (status !== 200) {
          lastRefusal = status;
          break;
        }
        ciStored++;
      }
    }
    t.ok(ciStored > 0, `acme/ci stored ${ciStored} objects before uploads were refused`);
    t.equal(lastRefusal, 507, 'the refusal is 507');
    const full = free();
    t.comment(`free space once uploads are refused: ${full} bytes`);
    t.ok(full > 0, `uploads are refused while the disk still has room (${full} bytes free)`);
    t.equal(await gauge('svc_store_reserve_bytes'), RESERVE, 'the reserve in use is exposed');
    t.equal(await gauge('svc_store_reserve_reached'), 1, 'reaching it is exposed');

    // While in the reserve: the batch says 507 per object, a PUT 507 with the Git LFS body, and two
    // PUTs on one keep-alive connection each get their answer (no reset).
    const small = blob(16 << 10);
    const refusedBatch = await batch(server.url, 'acme/game', 'tok', 'upload', [{ oid: small.oid, size: small.size }]);
    t.equal(refusedBatch.status, 200, 'the batch itself answers');
    t.equal(refusedBatch.json().objects[0].error?.code, 507, 'the batch entry says 507');
    const put = (b: Blob) =>
      rawHead(`PUT /acme/game/objects/${b.oid} HTTP/1.1`, [`Authorization: ${basic('tok')}`, 'Content-Type: application/octet-stream', `Content-Length: ${b.size}`]);
    const second = blob(16 << 10);
    const raw = await rawRequest(server.port, Buffer.concat([Buffer.from(put(small), 'latin1'), small.data, Buffer.from(put(second), 'latin1'), second.data]), { responses: 2 });
    t.equal(raw.responses.length, 2, 'both PUTs on the keep-alive connection are answered');
    for (const [i, res] of raw.responses.entries()) {
      t.equal(res.status, 507, `PUT ${i + 1} in the reserve: 507`);
      t.match(res.headers['content-type'], LFS, `PUT ${i + 1}: Git LFS media type`);
      t.match(JSON.parse(res.body.toString()), { message: String, request_id: String }, `PUT ${i + 1}: Git LFS error body`);
    }

    // What the index needs keeps working in the reserve: a lock, and a dashboard sign-in whose
    // session then serves.
    const lock = await http('POST', `${server.url}/acme/game/locks`, { headers: { ...auth, 'content-type': LFS, accept: LFS }, body: JSON.stringify({ path: 'assets/level.bin' }) });
    t.equal(lock.status, 201, 'a lock can be taken while uploads are refused');
    const signIn = await http('POST', `${server.url}/-/api/session`, { headers: { 'content-type': 'application/json', origin: server.url }, body: JSON.stringify({ token: 'tok-root' }) });
    t.equal(signIn.status, 201, `a dashboard sign-in works while uploads are refused (${signIn.body.toString().slice(0, 200)})`);
    const cookie = String(signIn.headers['set-cookie'] ?? '').split(';')[0]!;
    const overview = await http('GET', `${server.url}/-/api/overview`, { headers: { cookie } });
    t.equal(overview.status, 200, 'and its session serves the dashboard');
    t.equal(await gauge('svc_store_reserve_reached'), 1, 'still in the reserve after the lock and the sign-in');

    // Retain drops everything of acme/ci and frees its bytes.
    const before = free();
    const retain = await http('POST', `${server.url}/acme/ci/objects/retain`, { headers: { ...auth, 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oids: [] }) });
    t.equal(retain.status, 200, `retain on the full store answers 200 (${retain.body.toString().slice(0, 200)})`);
    if (retain.status === 200) t.ok(retain.json().bytes > 0, `retain freed ${retain.json().bytes} bytes`);
    t.ok(free() > before, `free space grew (${before} → ${free()} bytes)`);

    for (const size of [64 << 10, 2 << 20]) {
      const b = blob(size);
      t.equal(await upload('acme/game', b), 200, `${size} bytes stored again, without a restart`);
      acknowledged.push(b);
    }
    t.equal(await gauge('svc_store_reserve_reached'), 0, 'the reserve is no longer reached');

    let intact = 0;
    for (const b of acknowledged) {
      const back = await http('GET', `${server.url}/acme/game/objects/${b.oid}`, { headers: auth });
      if (back.status === 200 && back.body.equals(b.data)) intact++;
    }
    t.equal(intact, acknowledged.length, `every acknowledged object of acme/game reads back whole (${intact} of ${acknowledged.length})`);
  });

  t.test('partial resumable uploads count against the quota and the reserve, and retain removes them', async (t) => {
    const dataDir = join(mountPoint, 'data-tus');
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
    const QUOTA = 36 << 20;
    const env = { SVC_FORGE_A_API_URL: forge.url, SVC_GC_GRACE: '0', SVC_DISK_RESERVE: String(RESERVE), SVC_REPO_QUOTA: String(QUOTA), SVC_TUS_PORT: '0' };
    const server = await startServer(env, { dataDir, keepData: true });
    t.teardown(() => server.stop());
    const auth = { authorization: basic('tok') };
    const tus = (offset: number) => ({ ...auth, 'tus-resumable': '1.0.0', 'upload-offset': String(offset), 'content-type': 'application/offset+octet-stream' });
    const put = (repo: string, b: Blob) => http('PUT', `${server.url}/${repo}/objects/${b.oid}`, { headers: { ...auth, 'content-type': 'application/octet-stream' }, body: b.data });
    const offset = async (href: string): Promise<number> => Number((await http('HEAD', href, { headers: tus(0) })).headers['upload-offset']);

    const a = blob(12 << 20);
    const offer = await http('POST', `${server.url}/acme/game/objects/batch`, {
      headers: { ...auth, 'content-type': LFS, accept: LFS },
      body: JSON.stringify({ operation: 'upload', transfers: ['basic', 'tus'], objects: [{ oid: a.oid, size: a.size }] }),
    });
    t.equal(offer.json().transfer, 'tus');
    const href = offer.json().objects[0].actions.upload.href as string;
    const half = 6 << 20;
    t.equal((await http('PATCH', href, { headers: tus(0), body: a.data.subarray(0, half) })).status, 204, 'half of the object sent');

    // Stored 0 + partial 6 MiB + 32 MiB is past the 36 MiB quota (32 alone is not, and the disk has room for it).
    const overQuota = await put('acme/game', blob(32 << 20));
    t.equal(overQuota.status, 507, 'a PUT that fits only without the partial bytes is refused');
    t.match(overQuota.json().message, /quota/, 'by the quota');

    // acme/ci's uploads fill the disk up to the reserve.
    let refused = 0;
    for (const size of [4 << 20, 512 << 10, 64 << 10]) {
      for (let i = 0; i < 200 && refused === 0; i++) if ((await put('acme/ci', blob(size))).status !== 200) refused = size;
      refused = 0;
    }
    // On the same keep-alive connections as the requests around it: a refusal must not break them.
    const patch = await http('PATCH', href, { headers: tus(half), body: a.data.subarray(half) });
    t.equal(patch.status, 507, 'the rest, past the reserve: 507 as a PUT');
    t.match(patch.json().message, /SVC_DISK_RESERVE/, 'with the reserve named in the Git LFS body');
    t.equal(await offset(href), half, 'the bytes held before it are kept, nothing of it');

    const dry = await http('POST', `${server.url}/acme/game/objects/retain`, { headers: { ...auth, 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oids: [a.oid], dry_run: true }) });
    t.equal(dry.json().partial_uploads, 0, 'retain keeps the partial upload of an oid it is told to keep');
    const retain = await http('POST', `${server.url}/acme/game/objects/retain`, { headers: { ...auth, 'content-type': LFS, accept: LFS }, body: JSON.stringify({ oids: [] }) });
    t.equal(retain.json().partial_uploads, 1, 'and removes one no kept oid needs');
    t.equal((await http('HEAD', href, { headers: tus(0) })).status, 404, 'the upload is gone');
    t.match((await http('GET', `${server.url}/metrics`)).body.toString(), /^svc_partial_uploads 0$/m, 'and out of the metrics');
  });
}

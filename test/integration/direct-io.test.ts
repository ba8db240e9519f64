import { rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { basic, blob, http, push } from '../helpers/lfs-http.js';
import { cachedBytes, supportsDirect } from '../helpers/page-cache.js';
import { startServer, tmpDir } from '../helpers/start-server.js';

// Large uploads are written with O_DIRECT (README "Large uploads go past the page cache"): seen from
// outside, the stored object's bytes are not in the page cache after the upload, unless
// SVC_DIRECT_IO=false; either way the object reads back exactly.
const probeDir = tmpDir();
t.teardown(() => rmSync(probeDir, { recursive: true, force: true }));
const skip = !supportsDirect(probeDir) ? `${probeDir}: no O_DIRECT on this file system` : cachedBytes(probeDir) === null ? 'fincore (util-linux-extra) is not installed' : false;

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok', { login: 'w', repos: { 'acme/game': 'push' } });
const objectPath = (dataDir: string, oid: string): string => join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);

for (const [name, env, direct] of [
  ['plain store', {}, true],
  ['zstd:3 store, incompressible object (its raw frames go direct)', { SVC_COMPRESSION: 'zstd:3' }, true],
  ['SVC_DIRECT_IO=false', { SVC_DIRECT_IO: 'false' }, false],
] as const) {
  t.test(name, { skip }, async (t) => {
    const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, ...env });
    t.teardown(() => server.stop());
    const big = blob((12 << 20) + 777);
    t.equal(await push(server.url, 'acme/game', 'tok', big), 200, 'stored');
    const cached = cachedBytes(objectPath(server.dataDir, big.oid))!;
    if (direct) t.ok(cached <= 64 << 10, `the page cache holds ${cached} bytes of it: only the unaligned tail`);
    else t.ok(cached >= 12 << 20, `the page cache holds ${cached} bytes of it: all of it`);
    const back = await http('GET', `${server.url}/acme/game/objects/${big.oid}`, { headers: { authorization: basic('tok') } });
    t.equal(back.status, 200);
    t.ok(back.body.equals(big.data), 'read back byte for byte');
    const small = blob(3 << 20);
    t.equal(await push(server.url, 'acme/game', 'tok', small), 200);
    t.ok(cachedBytes(objectPath(server.dataDir, small.oid))! >= 3 << 20, 'objects under 8 MiB stay in the cache for the downloads that follow');
  });
}

/**
 * Checks that a keep-alive connection stays usable after uploads whose size falls on the server's
 * internal buffer boundaries (found by native-bench: a PUT of exactly 1 MiB left the socket paused, and
 * the next request on that connection — git-lfs's verify — got ECONNRESET).
 *
 *   npm run bench:build && node native-bench/dist/keepalive-check.js
 *
 * Exits 1 when any request after an upload fails. One undici connection, so every request reuses it.
 */
import { createHash } from 'node:crypto';
import { SeededBytes } from './lib/data-gen.js';
import { LfsClient } from './lib/lfs-client.js';
import { GitHubEmulator, startServer } from './lib/product.js';

const SIZES = [65536, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 2 << 20, 4 << 20, 3 << 20];

async function main(): Promise<void> {
  const forge = new GitHubEmulator();
  forge.tokens.set('check-token', { login: 'check', repos: { 'check/repo': 'push' } });
  forge.repos.set('check/repo', { private: true });
  await forge.start();
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url });
  const client = new LfsClient(server.url, 'check/repo', 'check-token', 1);
  const failures: string[] = [];
  try {
    for (const size of SIZES) {
      for (let round = 0; round < 3; round++) {
        const data = new SeededBytes(`check-${size}-${round}-${Date.now()}`).bytes(size);
        const oid = createHash('sha256').update(data).digest('hex');
        try {
          await client.upload(oid, size, () => data);
          const [entry] = await client.batch('download', [{ oid, size }]);
          if (entry?.actions?.download === undefined) throw new Error('no download action after upload');
        } catch (e) {
          failures.push(`${size} bytes (round ${round}): ${(e as Error).message}`);
        }
      }
    }
  } finally {
    await client.close();
    await server.stop();
    await forge.stop();
  }
  for (const f of failures) process.stdout.write(`FAIL ${f}\n`);
  process.stdout.write(failures.length === 0 ? `ok: ${SIZES.length * 3} uploads, connection reused after each\n` : `${failures.length} failures\n`);
  process.exit(failures.length === 0 ? 0 : 1);
}

main().catch((e: unknown) => {
  process.stderr.write(`${(e as Error)?.stack ?? String(e)}\n`);
  process.exit(2);
});

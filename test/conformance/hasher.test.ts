import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import t from 'tap';
import { HashThread } from '../../src/workers/hash-thread.js';
import { loadSha256Addon, NativeHasher } from '../../src/workers/native-hasher.js';
import { hasherConformance } from './hasher.suite.js';

// Runs the Hasher conformance suite (hasher.suite.ts) against both implementations: the sha256 addon
// on its native thread (what the server uses; `npm test` builds it and fails without it) and the worker
// thread the server falls back to when the addon is not built.
const sha256 = loadSha256Addon();
t.ok(sha256, 'the sha256 addon is built (scripts/build-native.mjs needs a C++ compiler and Node\'s headers)');

if (sha256 !== null) {
  await hasherConformance(t, 'the sha256 addon on its native thread', () => ({ hasher: new NativeHasher(sha256), close: async () => undefined }));

  await t.test('the addon refuses what it cannot hash, with a clear error, and stays usable', async (t) => {
    const s = sha256.open();
    t.throws(() => sha256.update(s, 'text' as unknown as Uint8Array, () => undefined), /Uint8Array/, 'a string is not bytes');
    t.throws(() => sha256.update(s, new Uint16Array(4) as unknown as Uint8Array, () => undefined), /Uint8Array/, 'nor is another typed array');
    t.throws(() => sha256.update({}, new Uint8Array(4), () => undefined), /not a sha256 stream/, 'an object that is not a stream');
    t.throws(() => sha256.digest({}), /not a sha256 stream/);
    t.equal(sha256.digest(s), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'the stream is untouched by the refused calls');
    t.throws(() => sha256.digest(s), /already taken/, 'a digest is taken once');
    t.throws(() => sha256.update(s, new Uint8Array(1), () => undefined), /already taken/, 'no update after the digest');
    t.throws(() => sha256.update(sha256.open(), new Uint8Array(1), 'not a function' as unknown as () => void), /callback must be a function/);
  });

  await t.test('a hash in flight keeps the process alive until its callback; an idle addon does not', async (t) => {
    // A process whose only pending work is one update: it must print the digest, then exit by
    // itself (the addon's thread, idle, holds nothing). The test waits for the exit, not a clock.
    const addonPath = new URL('../../native/sha256.node', import.meta.url).pathname;
    const script = `const a = require(${JSON.stringify(addonPath)}); const s = a.open(); const b = Buffer.alloc(3 << 20, 7);
      a.update(s, b, () => console.log(a.digest(s)));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['-e', script]);
    t.equal(stdout.trim(), createHash('sha256').update(Buffer.alloc(3 << 20, 7)).digest('hex'), 'the callback ran before the process ended, with the right digest');
  });
}

if (sha256 !== null) {
  await t.test('a state saved by one implementation goes on in the other (an upload moving to a node without the addon)', async (t) => {
    const native = new NativeHasher(sha256);
    const thread = new HashThread();
    t.teardown(() => thread.close());
    const data = randomBytes(200_003);
    for (const [from, to, name] of [[native, thread, 'addon to thread'], [thread, native, 'thread to addon']] as const) {
      const first = from.openResumable();
      await new Promise<void>((resolve) => first.update(data.subarray(0, 100_001), resolve));
      const next = to.openResumable(await first.snapshot());
      first.drop();
      await new Promise<void>((resolve) => next.update(data.subarray(100_001), resolve));
      t.equal(await next.digest(), createHash('sha256').update(data).digest('hex'), name);
    }
  });
}

await hasherConformance(t, 'a worker thread (the fallback)', () => {
  const thread = new HashThread();
  return { hasher: thread, close: () => thread.close() };
});

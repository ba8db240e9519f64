import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { textLike } from '../helpers/data.js';
import { pushableGame } from '../helpers/forge-emulator.js';
import { waitForDir } from '../helpers/fs-events.js';
import { basic, batch, blob, blobOf, http, LFS, push, type Blob, type Reply } from '../helpers/lfs-http.js';
import { startServer, tmpDir, waitForFile } from '../helpers/start-server.js';

// Two store defects seen from outside, on the real server: an `objects/` folder that refuses writes
// while `staging/` still takes them, and the stored size of a small object stored compressed.
const { forge, env } = await pushableGame(t);
forge.tokens.set('root', { login: 'root', siteAdmin: true, repos: {} });
const auth = { authorization: basic('tok') };
const get = (url: string, oid: string) => http('GET', `${url}/acme/game/objects/${oid}`, { headers: auth });
const pathOf = (dataDir: string, oid: string): string => join(dataDir, 'objects', oid.slice(0, 2), oid.slice(2, 4), oid);
const segments = (dataDir: string): string[] => readdirSync(join(dataDir, 'journal')).filter((n) => /^seg-\d+\.log$/.test(n));

/** Batch and PUT of one upload, with the whole PUT reply (push() gives only the status). */
async function putReply(base: string, b: Blob): Promise<Reply> {
  const answer = await batch(base, 'acme/game', 'tok', 'upload', [{ oid: b.oid, size: b.size }]);
  const action = answer.json().objects[0].actions.upload;
  return http('PUT', action.href, { headers: { ...auth, 'content-type': 'application/octet-stream', ...(action.header ?? {}) }, body: b.data });
}

/** A refusal the client can act on: 507, or 503 with Retry-After, with the Git LFS error body; never 500. */
function assertRefused(t: Test, res: Reply, what: string): void {
  t.ok(res.status === 507 || (res.status === 503 && res.headers['retry-after'] !== undefined), `${what}: refused with ${res.status} (${res.body.toString().slice(0, 200)})`);
  t.match(res.headers['content-type'], LFS, `${what}: Git LFS media type`);
  t.match(res.json(), { message: String, request_id: String }, `${what}: Git LFS error body`);
}

/**
 * Makes `dir` and everything in it refuse changes, even to root (chmod does not stop root): the
 * immutable attribute, where the file system has it (ext4 does). Reads still work. Returns how to
 * undo it, or null when this file system cannot.
 */
function makeImmutable(dir: string): (() => void) | null {
  if (spawnSync('chattr', ['-R', '+i', dir]).status !== 0) return null;
  const undo = (): void => void spawnSync('chattr', ['-R', '-i', dir]);
  // Some file systems accept the flag and do not enforce it: check that a new entry really fails.
  try {
    closeSync(openSync(join(dir, '.immutable-check'), 'wx'));
  } catch {
    return undo;
  }
  undo();
  spawnSync('rm', ['-f', join(dir, '.immutable-check')]);
  return null;
}

// chmod does not stop root, which CI runs as: the test needs a file system with the immutable flag.
const scratch = tmpDir();
const immutable = makeImmutable(scratch);
immutable?.();
const unwritable = immutable === null ? { skip: 'needs a file system where chattr +i makes a folder refuse writes to root (ext4 does)' } : {};

t.test('objects/ refusing writes: /ready says so, PUTs answer 503/507 with the LFS body, nothing acknowledged is lost', unwritable, async (t) => {
  const dataDir = tmpDir();
  const objectsDir = join(dataDir, 'objects');
  // Registered first: whatever fails below, the folder is writable again (and removable) afterwards.
  let restore: (() => void) | null = null;
  t.teardown(() => restore?.());
  const server = await startServer(env, { dataDir });
  t.teardown(() => server.stop());

  t.equal((await http('GET', `${server.url}/ready`)).status, 200, 'ready while the store is writable');
  // Acknowledged before the fault: a journaled one (its file written by now) and a large one.
  const before = [blob(64 << 10), blob(9 << 20)];
  for (const o of before) t.equal(await push(server.url, 'acme/game', 'tok', o), 200, `${o.size} bytes stored`);
  await waitForFile(pathOf(dataDir, before[0]!.oid));

  restore = makeImmutable(objectsDir);
  if (restore === null) throw new Error('chattr +i worked on a scratch folder but not on objects/');

  const ready = await http('GET', `${server.url}/ready`);
  t.equal(ready.status, 503, '/ready answers 503 while objects/ refuses writes');
  t.match(ready.headers['content-type'], LFS, '/ready: Git LFS media type');
  t.match(ready.json(), { message: String, request_id: String }, '/ready: Git LFS error body');

  // Files written through staging/ and renamed into objects/: a plain one, and a large one (O_DIRECT
  // where there is one, and the hash thread). The staging file must not be left behind either.
  for (const size of [2 << 20, 9 << 20]) {
    const o = blob(size);
    assertRefused(t, await putReply(server.url, o), `a ${size}-byte upload`);
    t.same(readdirSync(join(dataDir, 'staging')).filter((n) => n.startsWith(o.oid)), [], `a ${size}-byte upload: no staging file left`);
    t.equal((await get(server.url, o.oid)).status, 404, `a ${size}-byte upload: not served`);
  }

  // A small object is acknowledged once journaled (journal/ is writable); its own file is written
  // later, when the journal retires. If it is refused, it must be refused like the others; if it is
  // acknowledged, it must be served now and get its file once objects/ takes writes again.
  const small = blob(64 << 10);
  const mark = server.logs.length;
  const smallReply = await putReply(server.url, small);
  const acknowledged = [...before];
  if (smallReply.status === 200) {
    acknowledged.push(small);
    await server.waitForLog((ev) => ev.msg?.startsWith('journal retirement failed'), 'the retirement to meet the refusing objects/', mark);
    t.ok((await get(server.url, small.oid)).body.equals(small.data), 'the acknowledged small object is served from the journal');
  } else {
    assertRefused(t, smallReply, 'a 64 KiB upload');
  }
  for (const o of acknowledged) t.ok((await get(server.url, o.oid)).body.equals(o.data), `${o.size} bytes acknowledged earlier still served`);

  // Writable again: ready, uploads taken, and the retirement catches up without a restart.
  restore();
  restore = null;
  t.equal((await http('GET', `${server.url}/ready`)).status, 200, 'ready again once objects/ takes writes');
  const after = blob(9 << 20);
  t.equal(await push(server.url, 'acme/game', 'tok', after), 200, 'a large upload is taken again');
  acknowledged.push(after);
  if (smallReply.status === 200) await waitForFile(pathOf(dataDir, small.oid));
  for (const o of acknowledged) t.ok((await get(server.url, o.oid)).body.equals(o.data), `${o.size} bytes intact at the end`);
});

t.test(
  'stored_bytes of a small object stored compressed is its file size',
  async (t) => {
    const server = await startServer({ ...env, SVC_COMPRESSION: 'zstd:3' });
    t.teardown(() => server.stop());
    const o = blobOf(textLike(300_000));
    t.equal(await push(server.url, 'acme/game', 'tok', o), 200, 'a 300,000-byte text object stored');
    // Journaled: it is retired once its file is written and its segment removed (the last event).
    const holding = segments(server.dataDir);
    await waitForFile(pathOf(server.dataDir, o.oid));
    await waitForDir(join(server.dataDir, 'journal'), (names) => !names.some((n) => holding.includes(n)));
    const file = statSync(pathOf(server.dataDir, o.oid)).size;
    t.ok(file < o.size / 2, `its file is compressed (${file} of ${o.size} bytes)`);

    const stats = (await http('GET', `${server.url}/acme/game/objects/stats`, { headers: auth })).json();
    const shown = (where: string, value: unknown): void => {
      t.equal(value, file, `${where} is the file size (${String(value)}, file ${file})`);
    };
    shown('objects/stats: stored_bytes', stats.stored_bytes);
    shown("objects/stats: the object's stored_size", stats.largest_objects[0]?.stored_size);
    const page = (await http('GET', `${server.url}/acme/game`, { headers: auth })).body.toString();
    shown('repository page: stored bytes', Number(/<data data-field="stored_bytes" value="(\d+)">/.exec(page)?.[1]));
    const overview = (await http('GET', `${server.url}/-/api/overview`, { headers: { authorization: 'Bearer root' } })).json();
    shown('overview: stored_bytes', overview.stored_bytes);
    t.ok(existsSync(pathOf(server.dataDir, o.oid)), 'the file is still there');
  },
);

import { createHash, randomBytes } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { CacheLedger } from '../../../src/cache/cache-ledger.js';
import { FillCoordinator } from '../../../src/cache/fill-coordinator.js';
import { UpstreamClient } from '../../../src/cache/upstream-client.js';
import { isLfsError } from '../../../src/errors/errors.js';
import type { Oid } from '../../../src/protocol/oid.js';
import type { DiskReserve } from '../../../src/store/disk-reserve.js';
import type { ChunkSource, StoredObject } from '../../../src/store/types.js';

// The fill path on the real FillCoordinator and a local HTTP upstream: placing before the verdict,
// flushing after it and what a crash leaves; the disk reserve for objects passed through; the
// ledger's recency after a restart.

const data = randomBytes(3 << 20);
const oid = createHash('sha256').update(data).digest('hex') as Oid;
let requests = 0;
const server = createServer((_req, res) => {
  requests++;
  res.writeHead(200, { 'content-length': String(data.length) });
  res.end(data);
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
t.teardown(() => server.close());
const upstream = new UpstreamClient('http://127.0.0.1:1/{org}/{repo}');
t.teardown(() => upstream.close());
const action = { href: `http://127.0.0.1:${(server.address() as AddressInfo).port}/blob`, header: {} };
const noStore = {
  async delete() {
    return false;
  },
  async *list(): AsyncIterable<StoredObject> {},
};
const events = { started: () => undefined, ended: () => undefined, fetched: () => undefined };

async function readAll(source: ChunkSource): Promise<Buffer> {
  const parts: Buffer[] = [];
  try {
    for (let c = await source.next(); c !== null; c = await source.next()) parts.push(Buffer.from(c));
  } finally {
    await source.close();
  }
  return Buffer.concat(parts);
}

t.test('a verified fill is in the store when its clients have it, and flushed by close', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'stowage-fill-'));
  const finalPath = (x: Oid): string => join(root, 'objects', x);
  const ledger = await CacheLedger.open(noStore, 100 << 20, null, { evicted: () => undefined });
  const fills = await FillCoordinator.open(join(root, 'fills'), finalPath, ledger, upstream, events);
  const got = await readAll(await fills.follow(oid, data.length, action, 0, data.length - 1));
  t.ok(got.equals(data), 'the bytes');
  t.ok(existsSync(finalPath(oid)), 'placed before the last chunk went out');
  t.equal(ledger.sizeOf(oid), data.length, 'and in the ledger');
  await fills.close();
  t.same(readdirSync(join(root, 'unsynced')), [], 'flushed: nothing left unsynced');
  t.same(readdirSync(join(root, 'fills')), [], 'nor staged');
});

t.test('a start removes placed fills a crash left unflushed, and nothing else', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'stowage-fill-'));
  const finalPath = (x: Oid): string => join(root, 'objects', x);
  const o = (c: string): Oid => c.repeat(64) as Oid;
  for (const d of ['objects', 'unsynced', 'fills']) mkdirSync(join(root, d));
  for (const x of [o('a'), o('b'), o('c')]) writeFileSync(finalPath(x), x);
  // a: placed, not flushed; b: flushed long ago; c: its unsynced name is of an earlier copy since evicted.
  linkSync(finalPath(o('a')), join(root, 'unsynced', `${o('a')}.0123456789ab`));
  writeFileSync(join(root, 'unsynced', `${o('c')}.0123456789ab`), 'old');
  writeFileSync(join(root, 'fills', `${o('b')}.0123456789ab`), 'half');
  // d: linked into the store, but the crash came before the rename out of the staging folder.
  writeFileSync(finalPath(o('d')), o('d'));
  linkSync(finalPath(o('d')), join(root, 'fills', `${o('d')}.0123456789ab`));
  await FillCoordinator.recover(join(root, 'fills'), finalPath);
  t.notOk(existsSync(finalPath(o('a'))), 'the unflushed copy is gone');
  t.notOk(existsSync(finalPath(o('d'))), 'and the one still named in the staging folder');
  t.ok(existsSync(finalPath(o('b'))), 'a flushed one stays');
  t.ok(existsSync(finalPath(o('c'))), 'another copy of the same oid stays');
  t.same(readdirSync(join(root, 'unsynced')), [], 'unsynced cleared');
  t.same(readdirSync(join(root, 'fills')), [], 'staging cleared');
});

t.test('an object larger than the cap is refused when the disk reserve is reached', async (t) => {
  const reserve = { admits: () => false } as unknown as DiskReserve;
  const ledger = await CacheLedger.open(noStore, 1 << 20, reserve, { evicted: () => undefined });
  const fills = await FillCoordinator.open(mkdtempSync(join(tmpdir(), 'stowage-fill-')), () => '/nonexistent', ledger, upstream, events);
  const before = requests;
  const refused = await fills.follow(oid, data.length, action, 0, data.length - 1).then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(isLfsError(refused) && refused.status === 507, 'refused with 507');
  t.equal(requests, before, 'nothing asked of the upstream');
});

t.test('after a restart the ledger evicts by recorded last use, and records each use', async (t) => {
  const o = (c: string): Oid => c.repeat(64) as Oid;
  const held = new Map<Oid, number>([
    [o('1'), 4],
    [o('2'), 4],
    [o('3'), 4],
  ]);
  const lastUse = new Map<Oid, number>([
    [o('1'), 300],
    [o('2'), 100],
    [o('3'), 200],
  ]);
  const store = {
    async delete(x: Oid) {
      return held.delete(x);
    },
    async *list(): AsyncIterable<StoredObject> {
      for (const [x, storedSize] of held) yield { oid: x, storedSize };
    },
  };
  const used: Oid[] = [];
  const ledger = await CacheLedger.open(store, 12, null, { evicted: () => undefined, used: (x) => used.push(x) }, async (x) => lastUse.get(x)!);
  t.ok(await ledger.promise(4), 'room for 4 more bytes');
  t.same([...held.keys()], [o('1'), o('3')], 'the least recently used (2) went, not the first listed');
  ledger.use(o('3'));
  t.same(used, [o('3')], 'a use is recorded');
});

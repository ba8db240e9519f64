import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
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
import type { StoredObject } from '../../../src/store/types.js';

// The disk reserve for objects passed through (the real FillCoordinator and a local HTTP upstream),
// and the ledger's recency after a restart.

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

import { join } from 'node:path';
import Database from 'better-sqlite3';
import t, { type Test } from 'tap';
import { pushableGame } from '../helpers/forge-emulator.js';
import { basic, batch, blob, http, type Blob } from '../helpers/lfs-http.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';

// A small upload is acknowledged once its journal record is durable, and its reference is committed
// to the index right after the answer (TransferService.upload). Here the index refuses that commit:
// another process (an operator's sqlite3 shell, say) holds its write lock past the server's busy
// timeout. The 200 already sent must hold all the same: the journal keeps the reference and hands it
// to the index once the lock is gone, without a restart, and after a kill through replay.

const { env } = await pushableGame(t);
const auth = { authorization: basic('tok') };
const REFUSED = 'the index did not take the reference of an acknowledged upload: the journal keeps it until it does';

/** A server on a data directory of its own, and a 64 KiB object whose upload is ready to send (preparePut). */
async function started(t: Test): Promise<{ dataDir: string; server: RunningServer; b: Blob; put: () => Promise<number> }> {
  const dataDir = tmpDir();
  const server = await startServer(env, { dataDir, keepData: true });
  t.teardown(() => server.stop());
  const b = blob(64 << 10);
  return { dataDir, server, b, put: await preparePut(server, b) };
}

/** Asks for the upload action first (the batch may write to the index too), then returns the PUT's sender. */
async function preparePut(server: RunningServer, b: Blob): Promise<() => Promise<number>> {
  const answer = await batch(server.url, 'acme/game', 'tok', 'upload', [{ oid: b.oid, size: b.size }]);
  const action = answer.json().objects[0].actions.upload;
  return async () => (await http('PUT', action.href, { headers: { ...auth, 'content-type': 'application/octet-stream', ...(action.header ?? {}) }, body: b.data })).status;
}

/** Holds the index's write lock from this process, as a second writer would, until the returned function runs. */
function holdWriteLock(dataDir: string): () => void {
  const db = new Database(join(dataDir, 'index.sqlite'));
  db.exec('BEGIN IMMEDIATE');
  return () => {
    db.exec('ROLLBACK');
    db.close();
  };
}

const scrape = async (server: RunningServer): Promise<string> => (await http('GET', `${server.url}/metrics`)).body.toString('utf8');

async function assertIntact(t: Test, server: RunningServer, b: Blob, what: string): Promise<void> {
  const res = await http('GET', `${server.url}/acme/game/objects/${b.oid}`, { headers: auth });
  t.equal(res.status, 200, `${what}: downloads`);
  t.ok(res.body.equals(b.data), `${what}: the same bytes`);
}

t.test('an acknowledged upload whose reference the index refused is restored once the index takes writes again', async (t) => {
  const { dataDir, server, b, put } = await started(t);
  const release = holdWriteLock(dataDir);
  let held = true;
  t.teardown(() => {
    if (held) release();
  });
  const from = server.logs.length;
  t.equal(await put(), 200, 'acknowledged: the journal holds the object and its reference');
  const refused = await server.waitForLog((l) => l.msg === REFUSED, 'the refused commit reported', from);
  t.match(refused, { level: 'warn', oid: b.oid, repo: 'acme/game' }, 'reported with the object and repository');
  t.notOk(JSON.stringify(refused).includes('tok'), 'no token in the report');
  t.match(await scrape(server), /^svc_journal_deferred_references 1$/m, 'the kept reference is on /metrics');
  release();
  held = false;
  await server.waitForLog((l) => l.msg === 'deferred journal references restored', 'the kept reference restored', from);
  await assertIntact(t, server, b, 'once the lock is gone, without a restart');
  t.match(await scrape(server), /^svc_journal_deferred_references 0$/m, 'and gone from /metrics');
  const down = await batch(server.url, 'acme/game', 'tok', 'download', [{ oid: b.oid, size: b.size }]);
  t.ok(down.json().objects[0].actions?.download, 'the batch offers it for download');
});

t.test('an acknowledged upload whose reference the index refused survives a kill', async (t) => {
  const { dataDir, server, b, put } = await started(t);
  const release = holdWriteLock(dataDir);
  const from = server.logs.length;
  try {
    t.equal(await put(), 200, 'acknowledged');
    await server.waitForLog((l) => l.msg === REFUSED, 'the refused commit reported', from);
    await server.stop('SIGKILL');
  } finally {
    release();
  }
  const again = await startServer(env, { dataDir, keepData: true });
  t.teardown(() => again.stop());
  await assertIntact(t, again, b, 'after a kill and a restart');
});

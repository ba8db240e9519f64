// Proves: the least a server keeping objects in files must spend per clone GET (the clone row's serving minimum).
/**
 * The serving minimum, the clone row's yardstick beside the null peer (as the durable minimum is the
 * small-upload rows'): the least a server that keeps its objects in files must do to answer a clone,
 * with nothing else around it (no index of its own, no metrics, no layers, no grants):
 * - batch (POST …/objects/batch): each object looked up in an index held in memory (oid → size),
 *   its download link carrying a bearer token the batch made, kept as its sha256 only;
 * - GET …/objects/OID: the token's sha256 looked up, then the object's file opened, `fstat`ed, read
 *   whole into one reused buffer and closed, and the bytes answered in one corked `end`.
 * These are the system calls our server makes per small `GET`; a server that reads its objects from
 * files can at most leave out the `fstat` (the index knows the size; a build of ours without it
 * measured the same within noise). What this costs on the machine bounds the clone row from below;
 * the null peer, answering from memory, shows what the file itself costs.
 *
 * Objects live under ROOT/OID[0:2]/OID[2:4]/OID, the layout of a repository's `.git/lfs/objects`:
 * the bench links each round's objects there, then `POST /index` reads the folder into the index
 * (outside the clone it measures). Objects over 1 MiB are not served (the small clone only).
 *
 * Usage: node serving-peer.js ROOT. Prints `{"port": N}` on stdout once listening; SIGTERM stops it.
 */
import uws from '@trufflesuite/uws-js-unofficial';
import { hash, randomBytes } from 'node:crypto';
import { closeSync, fstatSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = process.argv[2];
if (root === undefined) throw new Error('usage: serving-peer.js ROOT');
const LFS_JSON = 'application/vnd.git-lfs+json';
const MAX_OBJECT = 1 << 20;
const OID = /^[0-9a-f]{64}$/;
const index = new Map<string, number>();
/** sha256 (hex) of the tokens the batches handed out; the oldest go past 16 batches. */
const tokens: string[] = [];
const buffer = Buffer.allocUnsafe(MAX_OBJECT);
let port = 0;

const pathOf = (oid: string): string => join(root, oid.slice(0, 2), oid.slice(2, 4), oid);

function reindex(): number {
  index.clear();
  for (const e of readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (e.isFile() && OID.test(e.name)) index.set(e.name, statSync(join(e.parentPath, e.name)).size);
  }
  return index.size;
}

const app = uws.App();
app.post('/index', (res) => {
  res.onAborted(() => undefined);
  res.onData((_chunk, last) => {
    if (last) res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', LFS_JSON).end(JSON.stringify({ objects: reindex() })));
  });
});
app.post('/*', (res, req) => {
  const url = req.getUrl();
  const base = url.slice(0, -'/batch'.length);
  let gone = false;
  const chunks: Buffer[] = [];
  res.onAborted(() => (gone = true));
  res.onData((chunk, last) => {
    chunks.push(Buffer.from(chunk.slice(0)));
    if (!last || gone) return;
    const asked = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { objects: { oid: string; size: number }[] }).objects;
    const token = randomBytes(32).toString('base64url');
    tokens.push(hash('sha256', token));
    if (tokens.length > 16) tokens.shift();
    const header = { Authorization: `Bearer ${token}` };
    const answer = {
      transfer: 'basic',
      objects: asked.map(({ oid }) => {
        const size = index.get(oid);
        return size === undefined
          ? { oid, size: 0, error: { code: 404, message: 'Object does not exist' } }
          : { oid, size, authenticated: true, actions: { download: { href: `http://127.0.0.1:${port}${base}/${oid}`, header, expires_in: 3600 } } };
      }),
    };
    res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', LFS_JSON).end(JSON.stringify(answer)));
  });
});
app.get('/*', (res, req) => {
  const url = req.getUrl();
  const oid = url.slice(url.lastIndexOf('/') + 1);
  const auth = req.getHeader('authorization');
  if (!auth.startsWith('Bearer ') || !tokens.includes(hash('sha256', auth.slice(7)))) {
    res.cork(() => res.writeStatus('401 Unauthorized').writeHeader('Content-Type', LFS_JSON).end('{"message":"Credentials needed"}'));
    return;
  }
  if (!OID.test(oid) || !index.has(oid)) {
    res.cork(() => res.writeStatus('404 Not Found').writeHeader('Content-Type', LFS_JSON).end('{"message":"Object does not exist"}'));
    return;
  }
  const fd = openSync(pathOf(oid), 'r');
  let n = -1;
  try {
    const size = fstatSync(fd).size;
    if (size <= MAX_OBJECT) n = readSync(fd, buffer, 0, size, 0);
  } finally {
    closeSync(fd);
  }
  if (n < 0) {
    res.cork(() => res.writeStatus('501 Not Implemented').writeHeader('Content-Type', LFS_JSON).end(`{"message":"serving-peer.js serves objects of up to ${MAX_OBJECT} bytes"}`));
    return;
  }
  // end() copies into uWS's buffer what the socket does not take: the buffer is free again after it.
  res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', 'application/octet-stream').end(buffer.subarray(0, n)));
});
app.listen('127.0.0.1', 0, (socket) => {
  if (socket === false) process.exit(1);
  port = uws.us_socket_local_port(socket);
  process.stdout.write(`${JSON.stringify({ port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));

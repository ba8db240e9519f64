// Proves: what curl, loopback TCP and uWS cost with no server work behind them (the small-object and clone rows' floor).
/**
 * A server that stores nothing, on the same HTTP layer as ours (uWS), for the floor of the small-object
 * rows: the same curl runs against it show what curl, loopback TCP and uWS cost with no server work
 * behind them, so a row's distance from its floor is what the server itself adds.
 * - PUT any path: reads the body into the void, answers 200 `{}` as Git LFS JSON (curl's
 *   `Expect: 100-continue` is answered by uWS, as in our server);
 * - GET any path: answers 64 KiB.
 *
 * Given a directory of Git LFS objects (a repository's `.git/lfs/objects`), it also answers a clone
 * of that repository from memory, for the floor of the clone row: the batch API's download answers
 * (no authentication, no index) and each object's bytes at `GET …/objects/OID` (git-lfs checks the
 * digest, so they must be the object's own).
 * Prints `{"port": N}` on stdout once listening; SIGTERM stops it.
 */
import uws from '@trufflesuite/uws-js-unofficial';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const body = Buffer.alloc(65536, 0x5a);
/** Objects larger than this are streamed (a 1 GiB asset of a clone), smaller ones sent whole. */
const STREAMED_OVER = 1 << 20;
const objects = new Map<string, Buffer>();
const objectsDir = process.argv[2];
if (objectsDir !== undefined) {
  for (const e of readdirSync(objectsDir, { recursive: true, withFileTypes: true })) {
    if (e.isFile() && /^[0-9a-f]{64}$/.test(e.name)) objects.set(e.name, readFileSync(join(e.parentPath, e.name)));
  }
}
const LFS_JSON = 'application/vnd.git-lfs+json';
let port = 0;

const app = uws.App();
app.put('/*', (res) => {
  let gone = false;
  res.onAborted(() => (gone = true));
  res.onData((_chunk, last) => {
    if (last && !gone) res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', LFS_JSON).end('{}'));
  });
});
app.post('/*', (res, req) => {
  const url = req.getUrl();
  const base = url.slice(0, -'/batch'.length);
  let gone = false;
  let raw = Buffer.alloc(0);
  res.onAborted(() => (gone = true));
  res.onData((chunk, last) => {
    raw = Buffer.concat([raw, Buffer.from(chunk)]);
    if (!last || gone) return;
    const asked = (JSON.parse(raw.toString('utf8')) as { objects: { oid: string; size: number }[] }).objects;
    const answer = {
      transfer: 'basic',
      objects: asked.map(({ oid, size }) =>
        objects.has(oid)
          ? { oid, size, authenticated: true, actions: { download: { href: `http://127.0.0.1:${port}${base}/${oid}`, expires_in: 3600 } } }
          : { oid, size, error: { code: 404, message: 'Object does not exist' } },
      ),
    };
    res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', LFS_JSON).end(JSON.stringify(answer)));
  });
});
app.get('/*', (res, req) => {
  const url = req.getUrl();
  const bytes = objects.get(url.slice(url.lastIndexOf('/') + 1)) ?? body;
  if (bytes.length <= STREAMED_OVER) {
    res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', 'application/octet-stream').end(bytes));
    return;
  }
  // A large object goes as the socket takes it (uWS's tryEnd and onWritable): end() would copy
  // what the socket did not take into uWS's own buffer, a copy of the object no server makes.
  let gone = false;
  res.onAborted(() => (gone = true));
  const sendFrom = (offset: number): boolean => res.tryEnd(bytes.subarray(offset), bytes.length)[0];
  res.cork(() => {
    res.writeStatus('200 OK').writeHeader('Content-Type', 'application/octet-stream');
    if (!sendFrom(0)) res.onWritable((offset) => !gone && sendFrom(offset));
  });
});
app.listen('127.0.0.1', 0, (socket) => {
  if (socket === false) process.exit(1);
  port = uws.us_socket_local_port(socket);
  process.stdout.write(`${JSON.stringify({ port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));

/**
 * A server that stores nothing, on the same HTTP layer as ours (uWS), for the floor of the small-object
 * rows: the same curl runs against it show what curl, loopback TCP and uWS cost with no server work
 * behind them, so a row's distance from its floor is what the server itself adds.
 * - PUT any path: reads the body into the void, answers 200 `{}` as Git LFS JSON (curl's
 *   `Expect: 100-continue` is answered by uWS, as in our server);
 * - GET any path: answers 64 KiB.
 * Prints `{"port": N}` on stdout once listening; SIGTERM stops it.
 */
import uws from '@trufflesuite/uws-js-unofficial';

const body = Buffer.alloc(65536, 0x5a);
const app = uws.App();
app.put('/*', (res) => {
  let gone = false;
  res.onAborted(() => (gone = true));
  res.onData((_chunk, last) => {
    if (last && !gone) res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', 'application/vnd.git-lfs+json').end('{}'));
  });
});
app.get('/*', (res) => {
  res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', 'application/octet-stream').end(body));
});
app.listen('127.0.0.1', 0, (socket) => {
  if (socket === false) process.exit(1);
  process.stdout.write(`${JSON.stringify({ port: uws.us_socket_local_port(socket) })}\n`);
});
process.on('SIGTERM', () => process.exit(0));

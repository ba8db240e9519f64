// Proves: what loopback TCP through node:http carries each way (the limit our upload and download are set against).
/**
 * A plain node:http peer on 127.0.0.1 for the loopback limits, run as its own process so that it
 * does not share the benchmark's event loop (our server is a separate process too):
 * - PUT/POST any path: reads the body into the void and answers with the byte count (receive limit);
 * - GET /bytes/<n>: sends n bytes from a 1 MiB random block, honouring backpressure (send limit).
 * Prints `{"port": N}` on stdout once listening.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const block = randomBytes(1 << 20);

const server = createServer((req, res) => {
  if (req.method === 'GET') {
    const n = Number(/^\/bytes\/(\d+)$/.exec(req.url ?? '')?.[1] ?? 0);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(n) });
    let left = n;
    const pump = (): void => {
      while (left > 0) {
        const c = left >= block.length ? block : block.subarray(0, left);
        left -= c.length;
        if (!res.write(c)) {
          res.once('drain', pump);
          return;
        }
      }
      res.end();
    };
    pump();
    return;
  }
  let got = 0;
  req.on('data', (c: Buffer) => {
    got += c.length;
  });
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ received: got }));
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
process.on('SIGTERM', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});

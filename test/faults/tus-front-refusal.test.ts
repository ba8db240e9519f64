import { connect, type Socket } from 'node:net';
import t from 'tap';
import { Agent } from 'undici';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, blob, http } from '../helpers/lfs-http.js';
import { rawHead } from '../helpers/raw-http.js';
import { startServer } from '../helpers/start-server.js';

// The resumable-upload listener (SVC_TUS_PORT) passes a PATCH on to the main listener; when the
// main listener refuses it while the client is still sending the body, the client must get the
// answer and then either a connection it can go on using or one that says Connection: close and
// ends cleanly. Never a reset of the client's next request. Nothing here waits on a clock.

const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok', { login: 'w', repos: { 'acme/game': 'push' } });
const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_TUS_PORT: '0' });
t.teardown(() => server.stop());
const tusPort = (await server.waitForLog((ev) => ev.msg === 'listening', 'listening')).tus_port as number;

const auth = { authorization: basic('tok') };
/** The announced object; each PATCH sends 4 MiB more than it, refused (413) once past its size. */
const announced = blob(64 << 10);
const oversized = Buffer.concat([announced.data, Buffer.alloc(4 << 20, 'x')]);
const path = `/acme/game/objects/tus/${announced.oid}`;
const offer = await http('POST', `${server.url}/acme/game/objects/batch`, {
  headers: { ...auth, 'content-type': LFS, accept: LFS },
  body: JSON.stringify({ operation: 'upload', transfers: ['basic', 'tus'], objects: [{ oid: announced.oid, size: announced.size }] }),
});
t.equal(offer.json().transfer, 'tus', 'the batch offers tus');
t.equal(new URL(offer.json().objects[0].actions.upload.href).port, String(tusPort), 'through the resumable-upload listener');

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string>;
}

/** The client side of one connection: answers as they complete, and how the connection ended. */
class Conn {
  readonly socket: Socket;
  private buf = Buffer.alloc(0);
  ended: 'open' | 'end' | 'reset' = 'open';
  private wake: () => void = () => undefined;

  constructor(port: number) {
    this.socket = connect(port, '127.0.0.1');
    this.socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    this.socket.on('end', () => {
      if (this.ended === 'open') this.ended = 'end';
      this.wake();
    });
    this.socket.on('error', () => {
      this.ended = 'reset';
      this.wake();
    });
    this.socket.on('close', () => this.wake());
  }

  /** The next complete answer (HEAD: no body), or null when the connection ended first. */
  async answer(head: boolean): Promise<Answer | null> {
    for (;;) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const lines = this.buf.toString('latin1', 0, end).split('\r\n');
        const headers: Record<string, string> = {};
        for (const line of lines.slice(1)) headers[line.slice(0, line.indexOf(':')).toLowerCase()] = line.slice(line.indexOf(':') + 1).trim();
        const length = head ? 0 : Number(headers['content-length'] ?? 0);
        if (this.buf.length >= end + 4 + length) {
          this.buf = this.buf.subarray(end + 4 + length);
          return { status: Number(lines[0]!.split(' ')[1]), headers };
        }
      }
      if (this.ended !== 'open' || this.socket.destroyed) return null;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Resolves once the server ended the connection (FIN or reset). */
  async closed(): Promise<void> {
    while (this.ended === 'open' && !this.socket.destroyed) await new Promise<void>((resolve) => (this.wake = resolve));
  }
}

const patchHead = (length: number, offset: number, credentials: boolean): string =>
  rawHead(`PATCH ${path} HTTP/1.1`, [
    ...(credentials ? [`Authorization: ${basic('tok')}`] : []),
    'Tus-Resumable: 1.0.0',
    `Upload-Offset: ${offset}`,
    'Content-Type: application/offset+octet-stream',
    `Content-Length: ${length}`,
  ]);
const headRequest = rawHead(`HEAD ${path} HTTP/1.1`, [`Authorization: ${basic('tok')}`, 'Tus-Resumable: 1.0.0']);

/** Refused before the body is read (no credentials, a wrong offset) or partway into it (past the size). */
const REFUSALS = [
  { what: 'past the announced size', offset: 0, credentials: true, status: 413 },
  { what: 'at a wrong offset', offset: 5, credentials: true, status: 409 },
  { what: 'without credentials', offset: 0, credentials: false, status: 401 },
];

for (const c of REFUSALS) {
  t.test(`a PATCH ${c.what}, then HEADs on the same connection as git-lfs sends them: answered, never reset`, async (t) => {
    const conn = new Conn(tusPort);
    t.teardown(() => conn.socket.destroy());
    conn.socket.write(Buffer.concat([Buffer.from(patchHead(oversized.length, c.offset, c.credentials), 'latin1'), oversized]));
    const refused = await conn.answer(false);
    t.equal(refused?.status, c.status, `the PATCH ${c.what}: ${c.status}`);
    if (refused?.headers.connection?.toLowerCase() === 'close') {
      // The client was told not to reuse it: the connection must end as an end of stream, not a reset.
      await conn.closed();
      t.equal(conn.ended, 'end', 'the refusal said Connection: close, and the connection ended cleanly after it');
      return;
    }
    for (const n of [1, 2]) {
      conn.socket.write(headRequest);
      const head = await conn.answer(true);
      t.equal(head?.status, 200, `HEAD ${n} on the same keep-alive connection is answered (connection ${conn.ended})`);
      t.equal(head?.headers['upload-offset'], '0', `HEAD ${n}: nothing of the refused PATCH kept`);
    }
  });
}

for (const c of REFUSALS) {
  t.test(`a keep-alive client (one connection): a PATCH ${c.what}, then two HEADs, each gets its answer`, async (t) => {
    const one = new Agent({ connections: 1 });
    t.teardown(() => one.close());
    const url = `http://127.0.0.1:${tusPort}${path}`;
    const tus = (offset: number) => ({ 'tus-resumable': '1.0.0', 'upload-offset': String(offset), 'content-type': 'application/offset+octet-stream' });
    const patch = await http('PATCH', url, { headers: { ...tus(c.offset), ...(c.credentials ? auth : {}) }, body: oversized, dispatcher: one });
    t.equal(patch.status, c.status, `the PATCH ${c.what}: ${c.status}`);
    t.match(patch.json(), { message: String }, 'with the Git LFS error body');
    for (const n of [1, 2]) {
      const head = await http('HEAD', url, { headers: { ...tus(0), ...auth }, dispatcher: one }).catch((e: Error & { code?: string }) => e.code ?? e.message);
      t.equal(typeof head === 'string' ? head : head.status, 200, `HEAD ${n} after the refusal is answered`);
    }
  });
}

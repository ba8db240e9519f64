import uws from '@trufflesuite/uws-js-unofficial';
import { Agent, request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { UwsRequestContext } from '../../../src/http/context.js';
import { BodyPump } from '../../../src/http/request-body.js';
import { send } from '../../../src/http/respond.js';
import type { ObjectWriter, PutResult } from '../../../src/store/types.js';

// An upload whose body paused and resumed (backpressure) and whose finish then outlasts uWS's idle
// timer (8-12 s after a resume) still gets its answer: BodyPump leaves the finished body's socket
// paused, which keeps the timer off, and the answer resumes it. Without that, uWS cut the connection
// with no answer (nginx's 502 for a 1.2 GB object then stored). Real uWS on a real port; the writer
// is a stand-in that asks for a pause on every chunk and takes 16 s to finish.

const FINISH_MS = 16_000; // past uWS's worst case of 12 s, so the old behaviour fails every time

t.test('a finish longer than uWS idle timer after a paused body is still answered, and the connection reads on', async (t) => {
  let pauses = 0;
  const app = uws.App();
  app.put('/*', (res, req) => {
    const ctx = new UwsRequestContext(res, req, 'upload', 0);
    const body = new BodyPump(ctx);
    const drains: (() => void)[] = [];
    const writer: ObjectWriter = {
      write: () => {
        pauses++;
        setImmediate(() => drains.forEach((d) => d()));
        return false; // pause after every chunk: each drain resumes the socket
      },
      onDrain: (d) => void drains.push(d),
      finish: async () => {
        await sleep(FINISH_MS); // the slow finish this test is about, not a deadline
        return {} as PutResult;
      },
      abort: async () => undefined,
    };
    void body
      .into(writer)
      .then(() => writer.finish())
      .then(() => send(ctx, 200, '{}'));
  });
  app.get('/*', (res) => void res.end('next'));
  const listening = await new Promise<uws.us_listen_socket>((resolve, reject) => app.listen('127.0.0.1', 0, (s) => (s ? resolve(s) : reject(new Error('no listen')))));
  const port = uws.us_socket_local_port(listening);
  t.teardown(() => uws.us_listen_socket_close(listening));

  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const call = (method: string, body?: Buffer): Promise<{ status: number; text: string }> =>
    new Promise((resolve, reject) => {
      const r = request({ host: '127.0.0.1', port, method, path: '/o', agent, headers: body ? { 'transfer-encoding': 'chunked' } : {} }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      });
      r.on('error', reject);
      if (body) for (let at = 0; at < body.length; at += 64 << 10) r.write(body.subarray(at, at + (64 << 10)));
      r.end();
    });
  const put = await call('PUT', Buffer.alloc(4 << 20, 7));
  t.ok(pauses > 1, `the body paused and resumed (${pauses} pauses)`);
  t.same(put, { status: 200, text: '{}' }, 'answered 200 after the slow finish');
  t.same(await call('GET'), { status: 200, text: 'next' }, 'the next request on the connection is read');
});

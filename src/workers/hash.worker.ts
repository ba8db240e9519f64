/**
 * The hash thread (see store/hash-thread.ts): sha256 of large uploads, fed in order with views of
 * shared memory, so nothing is copied between threads.
 */
import { createHash, type Hash } from 'node:crypto';
import { parentPort } from 'node:worker_threads';

export type HashRequest =
  | { readonly id: number; readonly op: 'update'; readonly data: Uint8Array }
  | { readonly id: number; readonly op: 'digest' }
  | { readonly id: number; readonly op: 'drop' };

export type HashReply =
  | { readonly id: number; readonly op: 'updated' }
  | { readonly id: number; readonly op: 'dropped' }
  | { readonly id: number; readonly op: 'digest'; readonly hex: string };

const streams = new Map<number, Hash>();
const port = parentPort!;

port.on('message', (m: HashRequest) => {
  if (m.op === 'update') {
    let h = streams.get(m.id);
    if (h === undefined) streams.set(m.id, (h = createHash('sha256')));
    h.update(m.data);
    port.postMessage({ id: m.id, op: 'updated' } satisfies HashReply);
  } else if (m.op === 'digest') {
    const h = streams.get(m.id) ?? createHash('sha256');
    streams.delete(m.id);
    port.postMessage({ id: m.id, op: 'digest', hex: h.digest('hex') } satisfies HashReply);
  } else {
    streams.delete(m.id);
    port.postMessage({ id: m.id, op: 'dropped' } satisfies HashReply);
  }
});

/**
 * sha256 of uploads, off the HTTP thread. Each upload is a session whose hash state lives here;
 * chunks arrive as views of SharedArrayBuffers the HTTP thread filled, so nothing is copied between
 * threads, and messages of one session are handled in the order they were posted.
 */
import { createHash, type Hash } from 'node:crypto';
import { parentPort } from 'node:worker_threads';

export type HasherRequest =
  | { readonly op: 'update'; readonly id: number; readonly seq: number; readonly buffer: SharedArrayBuffer; readonly length: number }
  | { readonly op: 'digest'; readonly id: number; readonly seq: number }
  | { readonly op: 'drop'; readonly id: number };

export interface HasherReply {
  readonly id: number;
  readonly seq: number;
  readonly digest?: string;
}

const sessions = new Map<number, Hash>();

parentPort!.on('message', (m: HasherRequest) => {
  if (m.op === 'update') {
    let h = sessions.get(m.id);
    if (h === undefined) sessions.set(m.id, (h = createHash('sha256')));
    h.update(new Uint8Array(m.buffer, 0, m.length));
    parentPort!.postMessage({ id: m.id, seq: m.seq } satisfies HasherReply);
  } else if (m.op === 'digest') {
    const h = sessions.get(m.id) ?? createHash('sha256');
    sessions.delete(m.id);
    parentPort!.postMessage({ id: m.id, seq: m.seq, digest: h.digest('hex') } satisfies HasherReply);
  } else {
    sessions.delete(m.id);
  }
});

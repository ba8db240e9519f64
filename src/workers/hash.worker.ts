/**
 * The hash thread (see store/hash-thread.ts): sha256 of large uploads, fed in order with views of
 * shared memory, so nothing is copied between threads.
 */
import { createHash, type Hash } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { Sha256State } from './sha256-state.js';

export type HashRequest =
  | { readonly id: number; readonly op: 'update'; readonly data: Uint8Array }
  /** A stream whose state can be saved (node:crypto's cannot), from `saved` when given. */
  | { readonly id: number; readonly op: 'resumable'; readonly saved: Uint8Array | null }
  | { readonly id: number; readonly op: 'snapshot' }
  | { readonly id: number; readonly op: 'digest' }
  | { readonly id: number; readonly op: 'drop' };

export type HashReply =
  | { readonly id: number; readonly op: 'updated' }
  | { readonly id: number; readonly op: 'dropped' }
  | { readonly id: number; readonly op: 'snapshot'; readonly state: Uint8Array }
  | { readonly id: number; readonly op: 'digest'; readonly hex: string };

/** A saved-state sha256 as a stream of this thread (the caller checked `saved`). */
class Resumable {
  readonly #h: Sha256State;
  constructor(saved: Uint8Array | null) {
    this.#h = saved === null ? new Sha256State() : new Sha256State(saved);
  }
  update(data: Uint8Array): void {
    this.#h.update(data);
  }
  digest(): string {
    return this.#h.digest();
  }
  save(): Uint8Array {
    return this.#h.save();
  }
}

const streams = new Map<number, Hash | Resumable>();
const port = parentPort!;

port.on('message', (m: HashRequest) => {
  if (m.op === 'resumable') {
    streams.set(m.id, new Resumable(m.saved));
  } else if (m.op === 'snapshot') {
    const h = streams.get(m.id);
    // Only a resumable stream is asked (StreamHash.snapshot); one given nothing yet is a new one.
    const state = h instanceof Resumable ? h.save() : new Sha256State().save();
    port.postMessage({ id: m.id, op: 'snapshot', state } satisfies HashReply);
  } else if (m.op === 'update') {
    let h = streams.get(m.id);
    if (h === undefined) streams.set(m.id, (h = createHash('sha256')));
    h.update(m.data);
    port.postMessage({ id: m.id, op: 'updated' } satisfies HashReply);
  } else if (m.op === 'digest') {
    const h = streams.get(m.id) ?? createHash('sha256');
    streams.delete(m.id);
    port.postMessage({ id: m.id, op: 'digest', hex: h instanceof Resumable ? h.digest() : h.digest('hex') } satisfies HashReply);
  } else {
    streams.delete(m.id);
    port.postMessage({ id: m.id, op: 'dropped' } satisfies HashReply);
  }
});

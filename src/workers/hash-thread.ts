import type { Worker } from 'node:worker_threads';
import { lazyModule } from '../util/lazy-module.js';

// Loaded when the thread first starts (the first large upload): a server at rest runs no thread.
const workerThreads = lazyModule<typeof import('node:worker_threads')>('node:worker_threads');
import type { ResumableHasher, ResumableStreamHasher } from '../format/frame-codec.js';
import { Sha256State } from './sha256-state.js';
import type { HashReply, HashRequest } from './hash.worker.js';
import { THREAD_IDLE_MS } from './pool.js';

/** A running hash thread and the streams open on it. */
interface Running {
  readonly worker: Worker;
  readonly streams: Map<number, StreamHash>;
  /** Settles once the thread runs its code (Worker 'online'), or has died before that. */
  readonly up: Promise<void>;
  online: boolean;
}

/**
 * sha256 of large uploads on a worker thread (the fallback without the addon): the HTTP thread posts
 * a view of each shared buffer, hashed in place, in order. The thread exits after `idleMs` without a
 * stream (an isolate's memory); if it dies, its streams fail and the next stream starts a new one.
 */
export class HashThread implements ResumableHasher {
  /** The running thread and the streams open on it (a thread that died fails only its own). */
  #current: Running | null = null;
  #nextId = 1;
  readonly #idleMs: number;
  #idleTimer: NodeJS.Timeout | null = null;
  readonly #exitListeners: (() => void)[] = [];

  constructor(idleMs = THREAD_IDLE_MS) {
    this.#idleMs = idleMs;
  }

  get running(): boolean {
    return this.#current !== null;
  }

  get ready(): boolean {
    return this.#current?.online === true;
  }

  /** Starts the thread ahead of the uploads a batch announced; resolves once up (or dead). */
  warm(): Promise<void> {
    if (this.#current !== null) return this.#current.up; // its streams, or their end, look after its idle spell
    const current = this.#start();
    // The idle spell counts from the thread being up, however long its start took.
    void current.up.then(() => {
      if (this.#current === current && current.streams.size === 0 && this.#idleTimer === null) this.#idleSoon(current);
    });
    return current.up;
  }

  /** Calls `listener` each time a thread has exited (tests wait on this event, not on a clock). */
  onExit(listener: () => void): void {
    this.#exitListeners.push(listener);
  }

  open(): StreamHash {
    return this.#open(undefined);
  }

  /**
   * A running sha256 whose state can be saved, from `saved` when given (checked here: RangeError).
   * node:crypto cannot save its state, so the thread hashes these in JavaScript (Sha256State).
   */
  openResumable(saved?: Uint8Array): StreamHash {
    if (saved !== undefined) new Sha256State(saved);
    return this.#open(saved ?? null);
  }

  #open(saved: Uint8Array | null | undefined): StreamHash {
    const current = this.#current ?? this.#start();
    const { worker, streams } = current;
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    const id = this.#nextId++;
    const forget = (): void => {
      streams.delete(id);
      if (streams.size === 0 && this.#current === current) this.#idleSoon(current);
    };
    const s = new StreamHash(id, (m) => worker.postMessage(m), forget);
    streams.set(id, s);
    if (saved !== undefined) worker.postMessage({ id, op: 'resumable', saved } satisfies HashRequest);
    return s;
  }

  async close(): Promise<void> {
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    const w = this.#current?.worker;
    this.#current = null;
    await w?.terminate();
  }

  #idleSoon(current: Running): void {
    if (this.#idleTimer !== null) clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() => {
      this.#idleTimer = null;
      if (this.#current !== current || current.streams.size > 0) return;
      this.#current = null;
      void current.worker.terminate();
    }, this.#idleMs);
    this.#idleTimer.unref();
  }

  #start(): Running {
    const worker = new (workerThreads().Worker)(new URL('./hash.worker.js', import.meta.url));
    const streams = new Map<number, StreamHash>();
    worker.unref(); // an idle hash thread never keeps the process alive
    worker.on('message', (m: HashReply) => streams.get(m.id)?.receive(m));
    const fail = (why: unknown): void => {
      if (this.#current?.worker === worker) this.#current = null;
      const err = why instanceof Error ? why : new Error(`hash thread exited (${String(why)})`);
      for (const s of [...streams.values()]) s.fail(err);
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      fail(code);
      for (const listener of this.#exitListeners) listener();
    });
    let settle = (): void => undefined;
    const running: Running = { worker, streams, up: new Promise<void>((resolve) => (settle = resolve)), online: false };
    worker.once('online', () => {
      running.online = true;
      settle();
    });
    worker.once('exit', () => settle());
    this.#current = running;
    return running;
  }
}

export class StreamHash implements ResumableStreamHasher {
  readonly #id: number;
  readonly #post: (m: HashRequest) => void;
  readonly #forget: () => void;
  /** Updates and snapshots the thread has not answered yet, in order (a snapshot's callback takes its state). */
  readonly #pending: ((state?: Uint8Array, failed?: unknown) => void)[] = [];
  #digest: { resolve: (hex: string) => void; reject: (e: unknown) => void } | null = null;
  #failed: unknown = null;

  constructor(id: number, post: (m: HashRequest) => void, forget: () => void) {
    this.#id = id;
    this.#post = post;
    this.#forget = forget;
  }

  /** Hashes `data` (a view of shared memory) next; `done` runs once the thread is through with it. */
  update(data: Uint8Array, done: () => void): void {
    if (this.#failed !== null) {
      queueMicrotask(done);
      return;
    }
    this.#pending.push(done);
    this.#post({ id: this.#id, op: 'update', data });
  }

  /** The saved state after every update given before this call (a stream from openResumable only). */
  snapshot(): Promise<Uint8Array> {
    if (this.#failed !== null) return Promise.reject(this.#failed);
    return new Promise((resolve, reject) => {
      this.#pending.push((state, failed) => (state !== undefined ? resolve(state) : reject(failed)));
      this.#post({ id: this.#id, op: 'snapshot' });
    });
  }

  digest(): Promise<string> {
    if (this.#failed !== null) return Promise.reject(this.#failed);
    return new Promise((resolve, reject) => {
      this.#digest = { resolve, reject };
      this.#post({ id: this.#id, op: 'digest' });
    });
  }

  /**
   * An upload that ends without a digest (aborted, failed). The stream stays known until the thread
   * confirms, so the buffers it is still hashing are released as usual, never reused before.
   */
  drop(): void {
    if (this.#failed === null && this.#digest === null) this.#post({ id: this.#id, op: 'drop' });
  }

  receive(m: HashReply): void {
    if (m.op === 'updated') this.#pending.shift()?.();
    else if (m.op === 'snapshot') this.#pending.shift()?.(m.state);
    else if (m.op === 'dropped') this.#forget();
    else {
      this.#forget();
      this.#digest?.resolve(m.hex);
    }
  }

  fail(err: unknown): void {
    this.#failed = err;
    for (const done of this.#pending.splice(0)) done(undefined, err); // the buffers are free to reuse either way
    this.#digest?.reject(err);
    this.#forget();
  }
}



import { Worker } from 'node:worker_threads';
import type { HasherReply, HasherRequest } from './hasher.worker.js';

interface Waiter {
  readonly resolve: (r: HasherReply) => void;
  readonly reject: (e: unknown) => void;
}

interface HasherThread {
  worker: Worker;
  readonly waiting: Map<string, Waiter>;
  sessions: number;
}

/**
 * Dedicated threads that sha256 large uploads, so the HTTP thread only copies bytes from the socket
 * into shared buffers (measured here: sha256 is ≈0.6 ms of a ≈1 ms per-MiB event-loop cost of an
 * upload). Hashing is sequential per object, so each upload is one session bound to one thread;
 * sessions spread over the threads. A thread that dies fails its sessions' pending work (those
 * uploads answer 500) and is replaced.
 */
export class HasherPool {
  readonly #threads: HasherThread[] = [];
  readonly #filename: URL;
  #nextId = 1;
  #closed = false;

  constructor(threads: number, filename: URL = new URL('./hasher.worker.js', import.meta.url)) {
    this.#filename = filename;
    for (let i = 0; i < threads; i++) this.#threads.push(this.#spawn({ waiting: new Map(), sessions: 0 }));
  }

  #spawn(slot: Omit<HasherThread, 'worker'> & { worker?: Worker }): HasherThread {
    const thread = slot as HasherThread;
    const worker = new Worker(this.#filename);
    thread.worker = worker;
    worker.unref();
    worker.on('message', (r: HasherReply) => {
      const key = `${r.id}:${r.seq}`;
      const w = thread.waiting.get(key);
      thread.waiting.delete(key);
      w?.resolve(r);
    });
    const fail = (e: unknown): void => {
      if (thread.worker !== worker) return; // 'error' then 'exit' of a worker already replaced
      const err = e instanceof Error ? e : new Error(`hasher thread exited (${String(e)})`);
      for (const w of thread.waiting.values()) w.reject(err);
      thread.waiting.clear();
      if (!this.#closed) this.#spawn(thread);
    };
    worker.once('error', fail);
    worker.once('exit', (code) => fail(code));
    return thread;
  }

  /** A new hash for one upload. */
  session(): HashSession {
    const thread = this.#threads.reduce((a, b) => (b.sessions < a.sessions ? b : a));
    thread.sessions++;
    return new HashSession(thread, this.#nextId++, () => thread.sessions--);
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#threads.map((t) => t.worker.terminate()));
  }
}

/** The hash of one upload on one hasher thread. Updates are applied in the order they are made. */
export class HashSession {
  readonly #thread: HasherThread;
  readonly #id: number;
  readonly #release: () => void;
  #seq = 0;
  #ended = false;

  constructor(thread: HasherThread, id: number, release: () => void) {
    this.#thread = thread;
    this.#id = id;
    this.#release = release;
  }

  #post(m: HasherRequest & { seq: number }): Promise<HasherReply> {
    return new Promise<HasherReply>((resolve, reject) => {
      this.#thread.waiting.set(`${m.id}:${m.seq}`, { resolve, reject });
      this.#thread.worker.postMessage(m);
    });
  }

  /** Hashes the first `length` bytes of `buffer`; the buffer must not change until this settles. */
  async update(buffer: SharedArrayBuffer, length: number): Promise<void> {
    await this.#post({ op: 'update', id: this.#id, seq: ++this.#seq, buffer, length });
  }

  /** The hex sha256 of everything updated so far; ends the session. */
  async digest(): Promise<string> {
    this.#end();
    const r = await this.#post({ op: 'digest', id: this.#id, seq: ++this.#seq });
    return r.digest!;
  }

  /** Ends the session without a digest (an aborted upload). */
  drop(): void {
    if (this.#ended) return;
    this.#end();
    this.#thread.worker.postMessage({ op: 'drop', id: this.#id } satisfies HasherRequest);
  }

  #end(): void {
    if (!this.#ended) {
      this.#ended = true;
      this.#release();
    }
  }
}

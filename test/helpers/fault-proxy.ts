import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * What the proxy does with connections, switchable at run time:
 * - pass: forwards both ways to the upstream, as if it were not there;
 * - silent: accepts and forwards nothing, holding every socket open (a partition, a hung peer:
 *   nothing ever errors by itself). Connections open when it turns silent go silent too, and stay
 *   dead after it turns back to pass, as connections across a partition whose state was lost do;
 * - reset: destroys every socket, open or new (a peer that restarts or refuses);
 * - slow: forwards, but holds each chunk from the upstream `slowMs` before passing it on (a slow
 *   peer that keeps making progress).
 */
export type FaultMode = 'pass' | 'silent' | 'reset' | 'slow';

export interface FaultProxy {
  /** 127.0.0.1:port of the proxy: give this to the client instead of the upstream. */
  readonly host: string;
  readonly port: number;
  readonly mode: FaultMode;
  /** Switches mode; open connections follow (silent freezes them for good, reset destroys them). */
  setMode(mode: FaultMode): void;
  /** New connections go to this upstream from now on (a failover); open ones are left as they are. */
  retarget(host: string, port: number): void;
  /**
   * New connections wait, accepted but neither read nor forwarded, until the returned function is
   * called; they then go on to the upstream of that moment (a failover the client does not see).
   */
  hold(): () => void;
  /** Connections accepted so far, whatever became of them. */
  readonly accepted: number;
  /** Bytes passed from clients to the upstream so far. */
  readonly bytesUp: number;
  /**
   * Once `bytesUp` reaches `at`, the connection carrying that byte is destroyed (the byte and the
   * rest of its chunk are not passed on), once; `then` runs right after. A drop mid-transfer.
   */
  cutAt(at: number, then?: () => void): void;
  /** Resolves once `bytesUp` reaches `at` (nothing is cut). */
  upTo(at: number): Promise<void>;
  close(): Promise<void>;
}

interface Pair {
  readonly client: Socket;
  upstream: Socket | null;
  /** Frozen by silent: nothing passes any more, ever. */
  dead: boolean;
  /** Upstream chunks still held by slow mode. */
  held: number;
  /** Runs once nothing is held (the upstream's end waits for the data before it). */
  onFlushed: (() => void) | null;
}

/** Starts a TCP proxy on 127.0.0.1 (any free port) to `upstream`, in mode `pass`. */
export async function startFaultProxy(upstream: { host: string; port: number }, opts: { slowMs?: number } = {}): Promise<FaultProxy> {
  let target = { ...upstream };
  let mode: FaultMode = 'pass';
  let accepted = 0;
  const slowMs = opts.slowMs ?? 3000;
  const pairs = new Set<Pair>();
  const timers = new Set<NodeJS.Timeout>();
  let bytesUp = 0;
  let cut: { at: number; then: () => void } | null = null;
  const waiters: { at: number; resolve: () => void }[] = [];
  /** Connections accepted while held, each waiting to be connected on. */
  let holding: (() => void)[] | null = null;

  const destroy = (p: Pair): void => {
    p.client.destroy();
    p.upstream?.destroy();
    pairs.delete(p);
  };

  const server: Server = createServer((client) => {
    accepted++;
    client.on('error', () => undefined);
    const p: Pair = { client, upstream: null, dead: false, held: 0, onFlushed: null };
    pairs.add(p);
    if (mode === 'reset') return destroy(p);
    if (holding !== null) {
      client.pause();
      client.on('close', () => destroy(p));
      holding.push(() => {
        if (pairs.has(p)) forward(p);
      });
      return;
    }
    if (mode === 'silent') {
      // Read and drop whatever comes, so the sender's writes complete as a black-holed network's do.
      p.dead = true;
      client.on('data', () => undefined);
      return;
    }
    forward(p);
  });

  /** Connects `p` to the upstream and passes bytes both ways. */
  const forward = (p: Pair): void => {
    const { client } = p;
    const up = connect(target.port, target.host);
    p.upstream = up;
    // Once frozen, the upstream's end is not passed on either: the client must find out by itself.
    up.on('error', () => {
      if (!p.dead) destroy(p);
    });
    up.on('close', () => {
      if (p.dead) return;
      // What slow mode still holds goes first: the end of an answer comes after the answer.
      if (p.held === 0) destroy(p);
      else p.onFlushed = () => destroy(p);
    });
    client.on('close', () => destroy(p));
    up.on('drain', () => {
      if (!p.dead) client.resume();
    });
    client.on('data', (d: Buffer) => {
      if (p.dead) return;
      if (cut !== null && bytesUp + d.length >= cut.at) {
        const then = cut.then;
        cut = null;
        destroy(p);
        then();
        return;
      }
      bytesUp += d.length;
      // Backpressure: what is counted has left for the upstream, not piled up here.
      if (!up.write(d)) client.pause();
      for (const w of waiters.filter((w) => bytesUp >= w.at)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    });
    up.on('data', (d: Buffer) => {
      if (p.dead) return;
      if (mode !== 'slow') return void client.write(d);
      // Held, not dropped: order is kept since every chunk waits the same.
      up.pause();
      p.held++;
      const timer = setTimeout(() => {
        timers.delete(timer);
        p.held--;
        if (!p.dead) client.write(d);
        up.resume();
        if (p.held === 0) p.onFlushed?.();
      }, slowMs);
      timers.add(timer);
    });
    client.resume();
  };
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;

  return {
    host: '127.0.0.1',
    port,
    get mode() {
      return mode;
    },
    get accepted() {
      return accepted;
    },
    get bytesUp() {
      return bytesUp;
    },
    cutAt(at, then = () => undefined) {
      cut = { at, then };
    },
    upTo(at) {
      if (bytesUp >= at) return Promise.resolve();
      return new Promise<void>((resolve) => waiters.push({ at, resolve }));
    },
    setMode(next) {
      mode = next;
      for (const p of [...pairs]) {
        if (next === 'reset') destroy(p);
        else if (next === 'silent' && !p.dead) {
          p.dead = true;
          // The upstream must not see a close either: it would end the session cleanly.
          p.upstream?.pause();
          p.client.on('data', () => undefined);
        }
      }
    },
    retarget(host, port) {
      target = { host, port };
    },
    hold() {
      holding ??= [];
      return () => {
        const waiting = holding ?? [];
        holding = null;
        for (const open of waiting) open();
      };
    },
    async close() {
      for (const timer of timers) clearTimeout(timer);
      for (const p of [...pairs]) destroy(p);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

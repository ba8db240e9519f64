import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy that behaves like a WAN link to an upstream: each chunk is held `latencyMs` each way
 * and the link carries at most `bitsPerSecond` each way; it counts the bytes it carries each way, so
 * tests assert on bytes over the link (never on durations). `cutDownAt` drops the connection that
 * carries the n-th downstream byte (a link lost mid-transfer). Latency 0 and no cap: a plain counter.
 */
export interface WanProxy {
  readonly host: string;
  readonly port: number;
  /** Bytes carried from clients to the upstream. */
  readonly bytesUp: number;
  /** Bytes carried from the upstream to clients. */
  readonly bytesDown: number;
  /** Once `bytesDown` would pass `at`, the connection carrying that byte is destroyed (once). */
  cutDownAt(at: number): void;
  /** Resolves once the connection cut by cutDownAt is gone. */
  readonly cut: Promise<void>;
  close(): Promise<void>;
}

/** Bytes queued in one direction before its source is paused. */
const MAX_QUEUED = 1 << 20;

interface Direction {
  /** When the link is free again (ms, performance.now). */
  freeAt: number;
  queued: number;
  /** Chunks in flight, in order, each with when it arrives. */
  readonly fifo: { readonly chunk: Buffer; readonly at: number }[];
  timer: NodeJS.Timeout | null;
}

export async function startWanProxy(upstream: { host: string; port: number }, opts: { latencyMs?: number; bitsPerSecond?: number } = {}): Promise<WanProxy> {
  const latency = opts.latencyMs ?? 0;
  const bytesPerMs = opts.bitsPerSecond === undefined ? Infinity : opts.bitsPerSecond / 8 / 1000;
  let bytesUp = 0;
  let bytesDown = 0;
  let cutAt: number | null = null;
  let cutDone: () => void = () => undefined;
  const cut = new Promise<void>((resolve) => (cutDone = resolve));
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();

  /** Passes `from`'s bytes to `to` through the link's delay and rate. */
  const carry = (from: Socket, to: Socket, count: (n: number) => boolean, destroy: () => void): void => {
    const dir: Direction = { freeAt: 0, queued: 0, fifo: [], timer: null };
    // One timer per direction, draining in order: timers of different delays may fire out of order.
    const drain = (): void => {
      dir.timer = null;
      const now = performance.now();
      while (dir.fifo.length > 0 && dir.fifo[0]!.at <= now + 0.5) {
        const { chunk } = dir.fifo.shift()!;
        dir.queued -= chunk.length;
        to.write(chunk);
      }
      if (dir.queued <= MAX_QUEUED) from.resume();
      if (dir.fifo.length > 0) schedule();
    };
    const schedule = (): void => {
      if (dir.timer !== null) return;
      dir.timer = setTimeout(drain, Math.max(0, dir.fifo[0]!.at - performance.now()));
      timers.add(dir.timer);
    };
    from.on('data', (d: Buffer) => {
      if (!count(d.length)) return destroy();
      if (latency === 0 && bytesPerMs === Infinity) {
        if (!to.write(d)) from.pause();
        return;
      }
      const now = performance.now();
      dir.freeAt = Math.max(now, dir.freeAt) + d.length / bytesPerMs;
      dir.fifo.push({ chunk: d, at: dir.freeAt + latency });
      dir.queued += d.length;
      if (dir.queued > MAX_QUEUED) from.pause();
      schedule();
    });
    to.on('drain', () => {
      if (dir.queued <= MAX_QUEUED) from.resume();
    });
  };

  const server: Server = createServer((client) => {
    const up = connect(upstream.port, upstream.host);
    sockets.add(client);
    sockets.add(up);
    let gone = false;
    const destroy = (): void => {
      if (gone) return;
      gone = true;
      client.destroy();
      up.destroy();
      sockets.delete(client);
      sockets.delete(up);
    };
    client.on('error', destroy);
    up.on('error', destroy);
    client.on('close', destroy);
    up.on('close', destroy);
    carry(client, up, (n) => ((bytesUp += n), true), destroy);
    carry(
      up,
      client,
      (n) => {
        if (cutAt !== null && bytesDown + n > cutAt) {
          cutAt = null;
          setImmediate(cutDone);
          return false;
        }
        bytesDown += n;
        return true;
      },
      destroy,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    host: '127.0.0.1',
    port: (server.address() as { port: number }).port,
    get bytesUp() {
      return bytesUp;
    },
    get bytesDown() {
      return bytesDown;
    },
    cutDownAt(at) {
      cutAt = at;
    },
    cut,
    async close() {
      for (const t of timers) clearTimeout(t);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

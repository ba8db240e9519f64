import { connect as netConnect, type Socket } from 'node:net';
import postgres from 'postgres';

/** The connection pool every PostgreSQL aggregate shares. */
export type Sql = postgres.Sql<Record<string, never>>;

/**
 * Connections per node: the index's statements are short single round trips and the client
 * pipelines behind busy connections, so a few suffice; N nodes open N times this many.
 */
export const POOL_SIZE = 8;

/** SVC_INDEX_DEADLINE's default: well under git-lfs's 30 s activity timeout. */
export const DEFAULT_INDEX_DEADLINE_MS = 5_000;

/** int8 (counts, sizes, ms timestamps) and numeric (sums) as JS numbers: exact up to 2^53, far beyond any byte count. */
const asNumber = (x: string): number => Number(x);

/**
 * An index call that got no answer within its deadline (the database silent, partitioned away or
 * stuck): the HTTP boundary answers 503 with Retry-After (storage-fault.ts). Whether the statement
 * took effect is unknown, as with any lost answer; the client retries.
 */
export class IndexDeadlineError extends Error {
  override name = 'IndexDeadlineError';
  readonly code = 'INDEX_DEADLINE';
  constructor(ms: number) {
    super(`the index database did not answer within ${ms / 1000} s`);
  }
}

/** A pool and the deadline its calls are held to. */
export interface Pg {
  readonly sql: Sql;
  readonly deadlineMs: number;
  /**
   * Runs `call` (one or more statements on `sql`) and rejects with IndexDeadlineError when it has
   * not settled within `ms` (the pool's deadline unless told). A connection that has received
   * nothing during the whole of a missed call is then destroyed: a silent peer never errors by
   * itself, and its statements would hold their callers, and the pool, for good.
   */
  within<T>(call: () => Promise<T>, ms?: number): Promise<T>;
}

/** A connection's raw socket, and the handle whose byte counter sees its reads (TLS included). */
interface Watched {
  readonly socket: Socket;
  handle: { bytesRead?: number } | null;
}

/**
 * Every socket the pool opened, so that one found silent can be destroyed: the PostgreSQL client
 * does not let a query be abandoned otherwise (its cancel request needs a new connection, which a
 * silent database does not answer either).
 */
class Sockets {
  readonly #open = new Set<Watched>();
  #next = 0;

  /** The client's `socket` option: a TCP (or unix) connection to the next host of the URL, watched. */
  readonly open = (o: { host: string[]; port: number[]; path?: string | false }): Socket => {
    let socket: Socket;
    if (typeof o.path === 'string' && o.path !== '') socket = netConnect(o.path);
    else {
      const i = this.#next++ % o.host.length;
      socket = netConnect(o.port[i] ?? o.port[0]!, o.host[i]!);
      // The client names the TLS server after the socket's host (SNI), as for its own sockets.
      (socket as Socket & { host?: string }).host = o.host[i];
    }
    const w: Watched = { socket, handle: null };
    // The handle counts bytes read even once TLS is layered on the socket (the TLS socket reads it).
    const hold = (): void => void (w.handle = (socket as unknown as { _handle: Watched['handle'] })._handle);
    if (socket.connecting) socket.once('connect', hold);
    else hold();
    this.#open.add(w);
    socket.once('close', () => this.#open.delete(w));
    return socket;
  };

  /** Bytes each open socket has read so far. */
  mark(): Map<Watched, number> {
    const m = new Map<Watched, number>();
    for (const w of this.#open) m.set(w, w.handle?.bytesRead ?? 0);
    return m;
  }

  /** Destroys the sockets of `mark` that read nothing since; returns how many. */
  destroySilent(mark: Map<Watched, number>, ms: number): number {
    let n = 0;
    for (const [w, read] of mark) {
      if (!this.#open.has(w) || (w.handle?.bytesRead ?? 0) !== read) continue;
      w.socket.destroy(Object.assign(new Error(`no answer from the index database for ${ms / 1000} s: connection dropped`), { code: 'INDEX_DEADLINE' }));
      n++;
    }
    return n;
  }
}

/**
 * A pool for `url`: prepared statements (named, once per connection), int8 and sums as numbers, no
 * notice printing, and deadlines: connecting is given `deadlineMs` (a database that accepts and
 * never answers fails the attempt), calls through `within` the same, and reconnecting after the
 * database was away waits at most a second (the client's own backoff grows to 20 s, which kept a
 * node failing long after the database was back).
 */
export function connect(url: string, deadlineMs = DEFAULT_INDEX_DEADLINE_MS, log?: (msg: string, fields: object) => void): Pg {
  const sockets = new Sockets();
  const sql = postgres(url, {
    max: POOL_SIZE,
    prepare: true,
    onnotice: () => undefined,
    connection: { application_name: 'stowage' },
    connect_timeout: Math.max(1, Math.ceil(deadlineMs / 1000)),
    // Seconds: 50 ms doubling to 1 s, jittered so the nodes of a cluster do not reconnect in step.
    backoff: (retries: number) => Math.min(0.05 * 2 ** retries, 1) * (0.5 + Math.random() / 2),
    // A dead peer behind a real partition is noticed by the kernel too (not one that keeps the TCP session).
    keep_alive: 10,
    // Not in the client's type declarations, though documented and supported: our own sockets, watched.
    ...({ socket: sockets.open } as object),
    types: {
      int8: { to: 20, from: [20], serialize: (x: number) => String(x), parse: asNumber },
      numeric: { to: 1700, from: [1700], serialize: (x: number) => String(x), parse: asNumber },
    },
  }) as unknown as Sql;
  const within = <T>(call: () => Promise<T>, ms = deadlineMs): Promise<T> => {
    const mark = sockets.mark();
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        const dropped = sockets.destroySilent(mark, ms);
        if (dropped > 0) log?.('index database silent: connections dropped', { deadlineMs: ms, dropped });
        reject(new IndexDeadlineError(ms));
      }, ms);
      new Promise<T>((r) => r(call())).then(
        (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        (e: unknown) => {
          clearTimeout(timer);
          reject(e);
        },
      );
    });
  };
  return { sql, deadlineMs, within };
}

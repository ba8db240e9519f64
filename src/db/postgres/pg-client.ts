import { connect as netConnect, type Socket } from 'node:net';
import postgres from 'postgres';

export type Sql = postgres.Sql<Record<string, never>>;

/** Connections per node: statements are short single round trips and the client pipelines, so a few suffice. */
export const POOL_SIZE = 8;

/** SVC_INDEX_DEADLINE's default: well under git-lfs's 30 s activity timeout. */
export const DEFAULT_INDEX_DEADLINE_MS = 5_000;

/** int8 and numeric as JS numbers: exact up to 2^53, beyond any byte count. */
const asNumber = (x: string): number => Number(x);

/** An index call with no answer within its deadline: 503 with Retry-After; whether the statement took effect is unknown. */
export class IndexDeadlineError extends Error {
  override name = 'IndexDeadlineError';
  readonly code = 'INDEX_DEADLINE';
  constructor(ms: number) {
    super(`the index database did not answer within ${ms / 1000} s`);
  }
}

export interface Pg {
  readonly sql: Sql;
  readonly deadlineMs: number;
  /** Runs `call` under a deadline; a connection silent through a whole missed call is destroyed, since a silent peer never errors by itself. */
  within<T>(call: () => Promise<T>, ms?: number): Promise<T>;
}

interface Watched {
  readonly socket: Socket;
  handle: { bytesRead?: number } | null;
}

/**
 * Every socket the pool opened, so one found silent can be destroyed: the PostgreSQL client cannot
 * abandon a query otherwise (its cancel request needs a new connection, which goes unanswered too).
 */
class Sockets {
  readonly #open = new Set<Watched>();
  #next = 0;

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

  mark(): Map<Watched, number> {
    const m = new Map<Watched, number>();
    for (const w of this.#open) m.set(w, w.handle?.bytesRead ?? 0);
    return m;
  }

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

/** A pool for `url` with deadlines; reconnecting waits at most a second (the client's own backoff grows to 20 s, long after the database is back). */
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

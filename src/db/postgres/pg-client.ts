import postgres from 'postgres';

/** The connection pool every PostgreSQL aggregate shares. */
export type Sql = postgres.Sql<Record<string, never>>;

/**
 * Connections per node: the index's statements are short single round trips and the client
 * pipelines behind busy connections, so a few suffice; N nodes open N times this many.
 */
export const POOL_SIZE = 8;

/** int8 (counts, sizes, ms timestamps) and numeric (sums) as JS numbers: exact up to 2^53, far beyond any byte count. */
const asNumber = (x: string): number => Number(x);

/** A pool for `url`: prepared statements (named, once per connection), int8 and sums as numbers, no notice printing. */
export function connect(url: string): Sql {
  return postgres(url, {
    max: POOL_SIZE,
    prepare: true,
    onnotice: () => undefined,
    connection: { application_name: 'stowage' },
    // Fail a request fast when the database is down (503 + Retry-After), rather than hang it.
    connect_timeout: 10,
    types: {
      int8: { to: 20, from: [20], serialize: (x: number) => String(x), parse: asNumber },
      numeric: { to: 1700, from: [1700], serialize: (x: number) => String(x), parse: asNumber },
    },
  }) as unknown as Sql;
}

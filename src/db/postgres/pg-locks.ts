import type { CreateOutcome, LockIndex, LockRow, NewLock } from '../index-types.js';
import { toLock, type RawLock } from '../index-rows.js';
import type { Sql } from './pg-client.js';

/**
 * Locks on PostgreSQL, one round trip per call. Create runs stowage_lock_create (migration 001):
 * the unique (repo, path) index decides which of any number of racing creates, on any node, wins.
 */
export class PgLocks implements LockIndex {
  readonly #sql: Sql;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async create(lock: NewLock, staleBefore: number | null): Promise<CreateOutcome> {
    const rows = await this.#sql<(RawLock & { outcome: string })[]>`
      SELECT * FROM stowage_lock_create(${lock.id}, ${lock.repo}, ${lock.path}, ${lock.ref}::text, ${lock.ownerId}, ${lock.ownerName},
        ${lock.lockedAt}::int8, ${staleBefore}::int8)`;
    const first = rows[0]!;
    if (first.outcome === 'created') return { kind: 'created', lock: toLock(first) };
    if (first.outcome === 'conflict') return { kind: 'conflict', existing: toLock(first) };
    return { kind: 'taken_over', lock: toLock(first), previous: toLock(rows.find((r) => r.outcome === 'previous')!) };
  }

  async findById(repo: string, id: string): Promise<LockRow | null> {
    const rows = await this.#sql<RawLock[]>`SELECT * FROM locks WHERE repo = ${repo} AND id = ${id}`;
    return rows[0] === undefined ? null : toLock(rows[0]);
  }

  async findByPath(repo: string, path: string): Promise<LockRow | null> {
    const rows = await this.#sql<RawLock[]>`SELECT * FROM locks WHERE repo = ${repo} AND path = ${path}`;
    return rows[0] === undefined ? null : toLock(rows[0]);
  }

  async page(repo: string, after: number, limit: number): Promise<LockRow[]> {
    const rows = await this.#sql<RawLock[]>`SELECT * FROM locks WHERE repo = ${repo} AND seq > ${after}::int8 ORDER BY seq LIMIT ${limit}::int8`;
    return rows.map(toLock);
  }

  async delete(repo: string, id: string): Promise<boolean> {
    const r = await this.#sql`DELETE FROM locks WHERE repo = ${repo} AND id = ${id}`;
    return r.count > 0;
  }

  async count(repo: string): Promise<number> {
    const rows = await this.#sql<{ n: number }[]>`SELECT count(*) AS n FROM locks WHERE repo = ${repo}`;
    return rows[0]!.n;
  }
}

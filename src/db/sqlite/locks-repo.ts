import type { Statement } from 'better-sqlite3';
import type { CreateOutcome, LockIndex, LockRow, NewLock } from '../index-types.js';
import { toLock, type RawLock } from '../index-rows.js';
import type { Db } from './database.js';

const COLUMNS = 'seq, id, repo, path, ref, owner_id, owner_name, locked_at';

/** SQLite's answer when the unique (repo, path) index refuses a second lock. */
function isUniqueViolation(e: unknown): boolean {
  return (e as { code?: unknown })?.code === 'SQLITE_CONSTRAINT_UNIQUE';
}

/** Locks per repository. Every lookup by id also names the repository, so another's id is not found. */
export class LocksRepo implements LockIndex {
  readonly #byPath: Statement<[string, string], RawLock>;
  readonly #byId: Statement<[string, string], RawLock>;
  readonly #page: Statement<[string, number, number], RawLock>;
  readonly #insert: Statement<[string, string, string, string | null, string, string, number], RawLock>;
  readonly #deleteById: Statement<[string, string]>;
  readonly #count: Statement<[string], { n: number }>;
  readonly #create: (lock: NewLock, staleBefore: number | null) => CreateOutcome;

  constructor(db: Db) {
    this.#byPath = db.prepare(`SELECT ${COLUMNS} FROM locks WHERE repo = ? AND path = ?`);
    this.#byId = db.prepare(`SELECT ${COLUMNS} FROM locks WHERE repo = ? AND id = ?`);
    this.#page = db.prepare(`SELECT ${COLUMNS} FROM locks WHERE repo = ? AND seq > ? ORDER BY seq LIMIT ?`);
    this.#insert = db.prepare(
      `INSERT INTO locks (id, repo, path, ref, owner_id, owner_name, locked_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING ${COLUMNS}`,
    );
    this.#deleteById = db.prepare('DELETE FROM locks WHERE repo = ? AND id = ?');
    this.#count = db.prepare('SELECT count(*) AS n FROM locks WHERE repo = ?');
    const insert = (l: NewLock): LockRow => toLock(this.#insert.get(l.id, l.repo, l.path, l.ref, l.ownerId, l.ownerName, l.lockedAt)!);
    const tx = db.transaction((lock: NewLock, staleBefore: number | null): CreateOutcome => {
      const existing = this.#byPath.get(lock.repo, lock.path);
      if (existing === undefined) return { kind: 'created', lock: insert(lock) };
      const previous = toLock(existing);
      if (staleBefore === null || previous.lockedAt >= staleBefore) return { kind: 'conflict', existing: previous };
      this.#deleteById.run(previous.repo, previous.id);
      return { kind: 'taken_over', lock: insert(lock), previous };
    });
    // IMMEDIATE takes the write lock before the read: check-then-insert is atomic across processes too.
    this.#create = (lock, staleBefore) => tx.immediate(lock, staleBefore);
  }

  /** Takes the lock unless (repo, path) is held; a lock older than `staleBefore` is replaced in the same transaction. */
  async create(lock: NewLock, staleBefore: number | null): Promise<CreateOutcome> {
    try {
      return this.#create(lock, staleBefore);
    } catch (e) {
      if (!isUniqueViolation(e)) throw e;
      // Another writer on the same file won between our read and insert.
      const existing = this.#byPath.get(lock.repo, lock.path);
      if (existing === undefined) throw e;
      return { kind: 'conflict', existing: toLock(existing) };
    }
  }

  async findById(repo: string, id: string): Promise<LockRow | null> {
    const r = this.#byId.get(repo, id);
    return r === undefined ? null : toLock(r);
  }

  async findByPath(repo: string, path: string): Promise<LockRow | null> {
    const r = this.#byPath.get(repo, path);
    return r === undefined ? null : toLock(r);
  }

  async page(repo: string, after: number, limit: number): Promise<LockRow[]> {
    return this.#page.all(repo, after, limit).map(toLock);
  }

  /** Releases lock `id` of `repo`; false when it was not there (already released, or not this repo's). */
  async delete(repo: string, id: string): Promise<boolean> {
    return this.#deleteById.run(repo, id).changes > 0;
  }

  async count(repo: string): Promise<number> {
    return this.#count.get(repo)!.n;
  }
}

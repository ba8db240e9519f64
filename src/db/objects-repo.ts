import type { Statement } from 'better-sqlite3';
import type { Oid } from '../protocol/oid.js';
import type { Db } from './database.js';

export interface ObjectRow {
  readonly oid: Oid;
  readonly size: number;
  readonly storedSize: number;
}

/** Objects and per-repository references. Every statement prepared once. */
export class ObjectsRepo {
  readonly #getInRepo: Statement<[string, string], { size: number; stored_size: number }>;
  readonly #getObject: Statement<[string], { size: number; stored_size: number }>;
  readonly #insertObject: Statement<[string, number, number, number]>;
  readonly #insertRef: Statement<[string, string, number]>;
  readonly #addRef: (repo: string, oid: Oid, size: number, storedSize: number) => void;

  constructor(db: Db) {
    this.#getInRepo = db.prepare(
      'SELECT o.size, o.stored_size FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ? AND r.oid = ?',
    );
    this.#getObject = db.prepare('SELECT size, stored_size FROM objects WHERE oid = ?');
    this.#insertObject = db.prepare('INSERT OR IGNORE INTO objects (oid, size, stored_size, created_at) VALUES (?, ?, ?, ?)');
    this.#insertRef = db.prepare('INSERT OR IGNORE INTO repo_objects (repo, oid, created_at) VALUES (?, ?, ?)');
    this.#addRef = db.transaction((repo: string, oid: Oid, size: number, storedSize: number) => {
      const now = Date.now();
      this.#insertObject.run(oid, size, storedSize, now);
      this.#insertRef.run(repo, oid, now);
    });
  }

  /** The object as this repository sees it: only when the repository holds a reference (proof of possession). */
  findInRepo(repo: string, oid: Oid): ObjectRow | null {
    const row = this.#getInRepo.get(repo, oid);
    return row ? { oid, size: row.size, storedSize: row.stored_size } : null;
  }

  /** The object in the shared store, whoever uploaded it. Never let its answer reach a client. */
  findShared(oid: Oid): ObjectRow | null {
    const row = this.#getObject.get(oid);
    return row ? { oid, size: row.size, storedSize: row.stored_size } : null;
  }

  /** Records the object (if new) and this repository's reference, in one short transaction. */
  addReference(repo: string, oid: Oid, size: number, storedSize: number): void {
    this.#addRef(repo, oid, size, storedSize);
  }
}

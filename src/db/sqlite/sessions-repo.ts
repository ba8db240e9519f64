import type { Statement } from 'better-sqlite3';
import type { SessionIndex, SessionRow } from '../index-types.js';
import { toSession, type RawSession } from '../index-rows.js';
import type { Db } from './database.js';

/** Dashboard sign-in sessions. Every statement prepared once, in the constructor. */
export class SessionsRepo implements SessionIndex {
  readonly #insert: Statement<[string, string, string, string, number, number]>;
  readonly #get: Statement<[string, number], RawSession>;
  readonly #delete: Statement<[string]>;
  readonly #purge: Statement<[number]>;

  constructor(db: Db) {
    this.#insert = db.prepare('INSERT INTO sessions (id_hash, user_id, user_name, via, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)');
    this.#get = db.prepare('SELECT * FROM sessions WHERE id_hash = ? AND expires_at > ?');
    this.#delete = db.prepare('DELETE FROM sessions WHERE id_hash = ?');
    this.#purge = db.prepare('DELETE FROM sessions WHERE expires_at <= ?');
  }

  async insert(row: SessionRow): Promise<void> {
    this.#insert.run(row.idHash, row.userId, row.userName, row.via, row.createdAt, row.expiresAt);
  }

  /** The live session with this hash, or null when unknown or expired. */
  async find(idHash: string, now: number): Promise<SessionRow | null> {
    const r = this.#get.get(idHash, now);
    if (r === undefined) return null;
    return toSession(r);
  }

  async delete(idHash: string): Promise<boolean> {
    return this.#delete.run(idHash).changes > 0;
  }

  /** Removes expired sessions; returns how many. */
  async purgeExpired(now: number): Promise<number> {
    return this.#purge.run(now).changes;
  }
}

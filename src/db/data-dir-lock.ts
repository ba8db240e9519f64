import Database from 'better-sqlite3';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { StartRefusedError } from '../errors/start-refused.js';

/** An SQLite database, so the lock is SQLite's own POSIX record lock. */
const LOCK_FILE = 'stowage.lock';
/** Who holds the lock, for the refusal message only: the lock itself is what decides. */
const HOLDER_FILE = 'stowage.pid';

/**
 * One process per data directory (two would sweep each other's staging files and journal segments).
 * Node has no flock, so the lock is a never-ended exclusive transaction on an SQLite file of its own:
 * an fcntl lock the kernel releases however the process dies, so never stale as a PID file can be.
 */
export class DataDirLock {
  readonly #db: Database.Database;

  private constructor(db: Database.Database) {
    this.#db = db;
  }

  /** Takes the lock or throws StartRefusedError naming the holder; never waits. */
  static acquire(dataDir: string): DataDirLock {
    const db = new Database(join(dataDir, LOCK_FILE), { timeout: 0 });
    try {
      db.pragma('locking_mode = EXCLUSIVE');
      db.pragma('journal_mode = MEMORY'); // no stowage.lock-journal beside it
      // Taken at once and never committed: the lock needs no byte written (SQLite's lock bytes lie
      // past the end of the file), so it is taken on a full disk too.
      db.exec('BEGIN EXCLUSIVE');
    } catch (e) {
      db.close();
      if ((e as { code?: string }).code === 'SQLITE_BUSY') {
        throw new StartRefusedError(`data directory ${dataDir} is in use by another Stowage process${holderOf(dataDir)}; one process per data directory`);
      }
      throw e;
    }
    try {
      writeFileSync(join(dataDir, HOLDER_FILE), `${process.pid}\n`);
    } catch {
      // Informational only (a full disk must not stop the start).
    }
    return new DataDirLock(db);
  }

  release(): void {
    this.#db.close();
  }
}

function holderOf(dataDir: string): string {
  try {
    const pid = readFileSync(join(dataDir, HOLDER_FILE), 'utf8').trim();
    return /^\d+$/.test(pid) ? ` (pid ${pid})` : '';
  } catch {
    return '';
  }
}

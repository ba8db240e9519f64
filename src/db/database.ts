import Database from 'better-sqlite3';
import { MIGRATIONS } from './migrations/index.js';

export type Db = Database.Database;

/**
 * Opens the index with the pragmas every connection needs and brings the schema up to date.
 * WAL lets readers run beside the single writer; a busy timeout absorbs short write contention
 * (CLI jobs open the same file). Transactions are short and never span a byte stream.
 */
export function openDatabase(file: string): Db {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL'); // WAL + NORMAL is durable across process crashes; fsync at checkpoint
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  migrate(db);
  return db;
}

function migrate(db: Db): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > MIGRATIONS.length) {
    throw new Error(`index schema version ${current} is newer than this server knows (${MIGRATIONS.length}); refusing to run`);
  }
  for (let v = current; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]!.sql);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}

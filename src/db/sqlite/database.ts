import Database from 'better-sqlite3';
import { storageFault } from '../../errors/storage-fault.js';
import { MIGRATIONS } from './migrations/index.js';

export type Db = Database.Database;

/** Opens the index with the pragmas every connection needs and migrates it; WAL, a busy timeout, short transactions. */
export function openDatabase(file: string, log?: (msg: string, fields: object) => void, durableCommits = false): Db {
  try {
    return open(file, false, durableCommits, log);
  } catch (e) {
    if (storageFault(e) === null) throw e;
    // A full disk: WAL's -shm file cannot be created, so not even a read works. In exclusive locking
    // mode SQLite keeps that index in memory (https://www.sqlite.org/wal.html#noshm): reads work and
    // writes resume once space is back. Only the server opens the file.
    log?.('index opened in exclusive mode: no room for its shared-memory file', { err: String(e) });
    return open(file, true, durableCommits, log);
  }
}

function open(file: string, exclusive: boolean, durableCommits: boolean, log?: (msg: string, fields: object) => void): Db {
  const db = new Database(file);
  try {
    if (exclusive) db.pragma('locking_mode = EXCLUSIVE');
    return setUp(db, durableCommits, log);
  } catch (e) {
    db.close();
    throw e;
  }
}

/** Pages the WAL may hold before a commit checkpoints it on the event loop: a burst runs without one, and retirement checkpoints in the lull after. */
const WAL_AUTOCHECKPOINT_PAGES = 16_000;

/**
 * WAL + NORMAL survives process crashes and fsyncs at checkpoints only: enough beside the disk store's
 * journal. Without it (objects in a bucket), `durableCommits`: FULL, so a reference acknowledged with
 * a 200 survives a power cut.
 */
function setUp(db: Db, durableCommits: boolean, log?: (msg: string, fields: object) => void): Db {
  db.pragma('journal_mode = WAL');
  db.pragma(`wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
  db.pragma(`synchronous = ${durableCommits ? 'FULL' : 'NORMAL'}`);
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  migrate(db, log);
  return db;
}

function migrate(db: Db, log?: (msg: string, fields: object) => void): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > MIGRATIONS.length) {
    throw new Error(`index schema version ${current} is newer than this server knows (${MIGRATIONS.length}); refusing to run`);
  }
  for (let v = current; v < MIGRATIONS.length; v++) {
    const step = MIGRATIONS[v]!;
    const reported = db.transaction(() => {
      const rows = step.report === undefined ? [] : (db.prepare(step.report.sql).all() as object[]);
      db.exec(step.sql);
      db.pragma(`user_version = ${v + 1}`);
      return rows;
    })();
    for (const row of reported) log?.(step.report!.msg, { level: 'warn', migration: step.name, ...row });
  }
}

import Database from 'better-sqlite3';
import { storageFault } from '../../errors/storage-fault.js';
import { MIGRATIONS } from './migrations/index.js';

export type Db = Database.Database;

/**
 * Opens the index with the pragmas every connection needs and brings the schema up to date.
 * WAL lets readers run beside the single writer; a busy timeout absorbs short write contention
 * (CLI jobs open the same file). Transactions are short and never span a byte stream.
 */
export function openDatabase(file: string, log?: (msg: string, fields: object) => void, durableCommits = false): Db {
  try {
    return open(file, false, durableCommits, log);
  } catch (e) {
    if (storageFault(e) === null) throw e;
    // A full disk: WAL mode's shared-memory index (the -shm file, 32 KiB) cannot be created, so
    // not even a read works (SQLITE_IOERR_SHMSIZE). In exclusive locking mode SQLite keeps that index
    // in this process's memory instead (https://www.sqlite.org/wal.html#noshm): the index can be read
    // (downloads, batch) and written once space is back, without a restart. Other processes cannot
    // open the file meanwhile; the server is the only one that should (the CLI goes through HTTP).
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

/**
 * Pages the WAL may hold before a commit checkpoints it (SQLite's default is 1,000). A checkpoint
 * runs inside the commit that crosses the mark, on the event loop, holding every request; with 64 MiB
 * a burst of small uploads runs without one, and the journal's retirement checkpoints the index in
 * the lull after it (ReferenceLog.checkpoint).
 */
const WAL_AUTOCHECKPOINT_PAGES = 16_000;

/**
 * WAL + NORMAL is durable across process crashes and fsyncs at checkpoints only: enough beside the
 * disk store, whose journal holds every acknowledged reference until a checkpoint. Without that
 * journal (objects in a bucket), `durableCommits`: FULL, a commit waits for its WAL fsync, so a
 * reference acknowledged with a 200 survives a power cut (group commit shares one fsync).
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

import type { Index } from '../index-types.js';
import { DataKeysRepo } from './data-keys-repo.js';
import { openDatabase } from './database.js';
import { JobsRepo, MaintenanceRepo } from './jobs-repo.js';
import { LocksRepo } from './locks-repo.js';
import { NodesRepo } from './nodes-repo.js';
import { ObjectsRepo } from './objects-repo.js';
import { QuarantineHint } from './quarantine-hint.js';
import { SessionsRepo } from './sessions-repo.js';
import { SettingsRepo } from './settings-repo.js';
import { StatsRepo } from './stats-repo.js';

/**
 * The embedded index: one SQLite file beside the store (WAL, see database.ts), the default of
 * `npm start`. better-sqlite3 is synchronous, so every method answers in the same tick; the
 * interface is asynchronous for the PostgreSQL index's sake.
 */
export function openSqliteIndex(file: string, log?: (msg: string, fields: object) => void, durableCommits = false): Index {
  const db = openDatabase(file, log, durableCommits);
  const quarantine = new QuarantineHint(db);
  return {
    kind: 'sqlite',
    objects: new ObjectsRepo(db, quarantine),
    locks: new LocksRepo(db),
    sessions: new SessionsRepo(db),
    settings: new SettingsRepo(db),
    jobs: new JobsRepo(db),
    maintenance: new MaintenanceRepo(db, quarantine),
    stats: new StatsRepo(db),
    nodes: new NodesRepo(db),
    dataKeys: new DataKeysRepo(db),
    async ping() {
      db.prepare('SELECT 1').get();
    },
    async checkpoint() {
      db.pragma('wal_checkpoint(TRUNCATE)');
    },
    async close() {
      db.close();
    },
  };
}

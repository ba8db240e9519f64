import type { Index, JobIndex, LockIndex, MaintenanceIndex, NodeIndex, ObjectIndex, SessionIndex, SettingsIndex, StatsIndex } from '../index-types.js';
import { migrate, schemaCurrent } from './migrate.js';
import { connect, type Sql } from './pg-client.js';
import { PgJobs } from './pg-jobs.js';
import { PgLocks } from './pg-locks.js';
import { PgMaintenance } from './pg-maintenance.js';
import { PgNodes } from './pg-nodes.js';
import { PgObjects } from './pg-objects.js';
import { PgSessions } from './pg-sessions.js';
import { PgSettings } from './pg-settings.js';
import { PgStats } from './pg-stats.js';

/**
 * The index on PostgreSQL (`SVC_DATABASE_URL`), shared by every node of a cluster: whatever must
 * hold across nodes is decided by the database (unique indexes, row locks, advisory locks), never
 * by one node's memory. One pool of POOL_SIZE connections per node.
 */
export class PostgresIndex implements Index {
  readonly kind = 'postgres' as const;
  readonly objects: ObjectIndex;
  readonly locks: LockIndex;
  readonly sessions: SessionIndex;
  readonly settings: SettingsIndex;
  readonly jobs: JobIndex;
  readonly maintenance: MaintenanceIndex;
  readonly stats: StatsIndex;
  readonly nodes: NodeIndex;
  readonly #sql: Sql;

  private constructor(sql: Sql) {
    this.#sql = sql;
    this.objects = new PgObjects(sql);
    this.locks = new PgLocks(sql);
    this.sessions = new PgSessions(sql);
    this.settings = new PgSettings(sql);
    this.jobs = new PgJobs(sql);
    this.maintenance = new PgMaintenance(sql);
    this.stats = new PgStats(sql);
    this.nodes = new PgNodes(sql);
  }

  /**
   * Connects and migrates (under the migration lock, so nodes starting together migrate once).
   * Rejects when the database is unreachable or its schema is newer than this code.
   */
  static async open(url: string, log?: (msg: string, fields: object) => void): Promise<Index> {
    const sql = connect(url);
    try {
      await migrate(sql, log);
    } catch (e) {
      await sql.end({ timeout: 0 });
      throw e;
    }
    return new PostgresIndex(sql);
  }

  async ping(): Promise<void> {
    await schemaCurrent(this.#sql);
  }

  /** Committed is durable on PostgreSQL: nothing to do. */
  async checkpoint(): Promise<void> {}

  async close(): Promise<void> {
    await this.#sql.end({ timeout: 5 });
  }
}

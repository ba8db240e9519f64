import type { DataKeyIndex, Index, JobIndex, LockIndex, MaintenanceIndex, NodeIndex, ObjectIndex, ResumableIndex, SessionIndex, SettingsIndex, StatsIndex } from '../index-types.js';
import { migrate, schemaCurrent } from './migrate.js';
import { connect, type Pg } from './pg-client.js';
import { PgDataKeys } from './pg-data-keys.js';
import { PgJobs } from './pg-jobs.js';
import { PgLocks } from './pg-locks.js';
import { PgMaintenance } from './pg-maintenance.js';
import { PgNodes } from './pg-nodes.js';
import { PgResumable } from './pg-resumable.js';
import { PgObjects } from './pg-objects.js';
import { PgSessions } from './pg-sessions.js';
import { PgSettings } from './pg-settings.js';
import { PgStats } from './pg-stats.js';

/** The index on PostgreSQL, shared by every node of a cluster; one pool of POOL_SIZE connections per node. */
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
  readonly resumable: ResumableIndex;
  readonly dataKeys: DataKeyIndex;
  readonly #pg: Pg;

  private constructor(pg: Pg) {
    this.#pg = pg;
    const { sql } = pg;
    this.objects = bounded(pg, new PgObjects(sql));
    this.locks = bounded(pg, new PgLocks(sql));
    this.sessions = bounded(pg, new PgSessions(sql));
    this.settings = bounded(pg, new PgSettings(sql));
    this.jobs = bounded(pg, new PgJobs(sql));
    this.maintenance = bounded(pg, new PgMaintenance(sql), LONG_CALLS);
    this.stats = bounded(pg, new PgStats(sql), 'all');
    this.nodes = bounded(pg, new PgNodes(sql));
    this.resumable = bounded(pg, new PgResumable(sql));
    this.dataKeys = bounded(pg, new PgDataKeys(sql));
  }

  /** Migrates under the migration lock; rejects when unreachable or the schema is newer than this code. */
  static async open(url: string, log?: (msg: string, fields: object) => void, deadlineMs?: number): Promise<Index> {
    const pg = connect(url, deadlineMs, log);
    try {
      // Not bounded: a migration may rewrite large tables; connecting is (connect_timeout).
      await migrate(pg.sql, log);
    } catch (e) {
      await pg.sql.end({ timeout: 0 });
      throw e;
    }
    return new PostgresIndex(pg);
  }

  async ping(): Promise<void> {
    await this.#pg.within(() => schemaCurrent(this.#pg.sql));
  }

  /** Committed is durable on PostgreSQL: nothing to do. */
  async checkpoint(): Promise<void> {}

  async close(): Promise<void> {
    await this.#pg.sql.end({ timeout: 5 });
  }
}

/** Calls that read a whole repository's or the whole index's rows (jobs, the dashboard): a longer deadline. */
const LONG_CALLS: ReadonlySet<string> = new Set(['repoObjects']);

/** The deadline of a long call: six times the index deadline, at least 30 s. */
const longDeadline = (pg: Pg): number => Math.max(6 * pg.deadlineMs, 30_000);

/**
 * Every method held to the index deadline (Pg.within): the one place a deadline is applied, so
 * nothing waits on a silent database for good. Methods in `long` (or 'all') get longDeadline.
 */
function bounded<T extends object>(pg: Pg, aggregate: T, long: ReadonlySet<string> | 'all' = new Set()): T {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(aggregate, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== 'function') return value;
      let w = wrapped.get(prop);
      if (w === undefined) {
        const ms = long === 'all' || long.has(String(prop)) ? longDeadline(pg) : pg.deadlineMs;
        w = (...args: unknown[]) => pg.within(() => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args), ms);
        wrapped.set(prop, w);
      }
      return w;
    },
  });
}

import { join } from 'node:path';
import { redactDatabaseUrl } from '../config/load.js';
import type { Config } from '../config/schema.js';
import type { Index } from './index-types.js';
import { openSqliteIndex } from './sqlite/sqlite-index.js';

/**
 * The index this configuration names: PostgreSQL when SVC_DATABASE_URL is set, else SQLite in the
 * data directory. A failure to open names the reason and the URL with its password hidden.
 */
export async function openIndex(config: Pick<Config, 'dataDir' | 'databaseUrl'> & Partial<Pick<Config, 'store' | 'indexDeadline'>>, log: (msg: string, fields: object) => void): Promise<Index> {
  // Objects in a bucket: no node-local journal holds the references, so each commit is made durable (database.ts).
  if (config.databaseUrl === null) return openSqliteIndex(join(config.dataDir, 'index.sqlite'), log, config.store === 's3');
  const shown = redactDatabaseUrl(config.databaseUrl);
  try {
    // The client library loads only for a PostgreSQL index: an embedded server at rest never needs it.
    const { PostgresIndex } = await import('./postgres/postgres-index.js');
    const index = await PostgresIndex.open(config.databaseUrl, log, config.indexDeadline === undefined ? undefined : config.indexDeadline * 1000);
    log('index opened', { kind: 'postgres', database: shown });
    return index;
  } catch (e) {
    throw new Error(`the index database ${shown} cannot be used: ${(e as Error).message}`, { cause: e });
  }
}

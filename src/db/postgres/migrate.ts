import type { Sql } from './pg-client.js';
import { PG_MIGRATIONS } from './migrations/index.js';

/** The advisory lock every node takes to migrate ('stowage' in ASCII): the first migrates, the others find it current. */
const MIGRATION_LOCK = 0x73746f77616765n;

/** Migrates in one transaction under the lock (DDL is transactional); refuses a schema newer than this code, which must not write a newer layout. */
export async function migrate(sql: Sql, log?: (msg: string, fields: object) => void): Promise<void> {
  const reports: [string, string, object][] = [];
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK.toString()}::int8)`;
    await tx`CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`;
    const rows = await tx<{ version: number }[]>`SELECT version FROM schema_version`;
    const current = rows[0]?.version ?? 0;
    if (current > PG_MIGRATIONS.length) {
      throw new Error(`index schema version ${current} is newer than this server knows (${PG_MIGRATIONS.length}); refusing to run`);
    }
    for (let v = current; v < PG_MIGRATIONS.length; v++) {
      const step = PG_MIGRATIONS[v]!;
      if (step.report !== undefined) for (const row of await tx.unsafe(step.report.sql)) reports.push([step.report.msg, step.name, { ...row }]);
      await tx.unsafe(step.sql).simple();
      log?.('index migrated', { to: step.name });
    }
    if (rows.length === 0) await tx`INSERT INTO schema_version (version) VALUES (${PG_MIGRATIONS.length})`;
    else if (current < PG_MIGRATIONS.length) await tx`UPDATE schema_version SET version = ${PG_MIGRATIONS.length}`;
  });
  // Only once committed: a rolled-back step changed nothing.
  for (const [msg, migration, row] of reports) log?.(msg, { level: 'warn', migration, ...row });
}

export async function schemaCurrent(sql: Sql): Promise<void> {
  const rows = await sql<{ version: number }[]>`SELECT 1 AS alive, version FROM schema_version`;
  const v = rows[0]?.version ?? 0;
  if (v !== PG_MIGRATIONS.length) throw new Error(`index schema version ${v}, expected ${PG_MIGRATIONS.length}`);
}

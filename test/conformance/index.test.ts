import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { PostgresIndex } from '../../src/db/postgres/postgres-index.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { indexConformance, type IndexTarget } from './index.suite.js';

// Runs the Index conformance suite (index.suite.ts) against each implementation, on real
// databases: a SQLite file in a temp folder (several instances = several connections to the
// file, as the CLI and the server are), and a throwaway PostgreSQL server on loopback (a fresh
// database per case). CONFORMANCE_INDEXES=sqlite,postgres runs only those named (for work on one).

const only = process.env.CONFORMANCE_INDEXES?.split(',');
const wanted = (name: string): boolean => only === undefined || only.includes(name);

// The server starts before any subtest runs: started after the SQLite ones, its teardown ran at
// once (seen: the server was stopped while it started).
const pg = wanted('postgres') && hasPostgres() ? await startPostgres((fn) => t.teardown(fn)) : null;

if (wanted('sqlite')) {
  const scratch = mkdtempSync(join(tmpdir(), 'stowage-index-conformance-'));
  t.teardown(() => rmSync(scratch, { recursive: true, force: true }));
  let made = 0;
  await indexConformance(t, 'sqlite', async (): Promise<IndexTarget> => {
    const dir = join(scratch, String(++made));
    const file = join(dir, 'index.sqlite');
    return {
      open: async (log) => {
        mkdirSync(dir, { recursive: true });
        return openSqliteIndex(file, log);
      },
      remove: async () => rmSync(dir, { recursive: true, force: true }),
    };
  });
}

if (wanted('postgres')) {
  if (pg === null) {
    t.fail(POSTGRES_INSTALL_HINT);
  } else {
    await indexConformance(t, 'postgres', async (): Promise<IndexTarget> => {
      const url = await pg.createDatabase();
      return { open: (log) => PostgresIndex.open(url, log), remove: async () => undefined };
    });
  }
}

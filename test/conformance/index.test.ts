import t from 'tap';
import { PostgresIndex } from '../../src/db/postgres/postgres-index.js';
import { hasPostgres, POSTGRES_INSTALL_HINT, startPostgres } from '../helpers/postgres.js';
import { indexConformance, type IndexTarget } from './index.suite.js';

// Runs the Index conformance suite (index.suite.ts) against each implementation, on real
// databases: a throwaway PostgreSQL server on loopback (a fresh database per case).
// CONFORMANCE_INDEXES=sqlite,postgres runs only those named (for work on one).

const only = process.env.CONFORMANCE_INDEXES?.split(',');
const wanted = (name: string): boolean => only === undefined || only.includes(name);

if (wanted('postgres')) {
  if (!hasPostgres()) {
    t.fail(POSTGRES_INSTALL_HINT);
  } else {
    const pg = await startPostgres((fn) => t.teardown(fn));
    await indexConformance(t, 'postgres', async (): Promise<IndexTarget> => {
      const url = await pg.createDatabase();
      return { open: (log) => PostgresIndex.open(url, log), remove: async () => undefined };
    });
  }
}

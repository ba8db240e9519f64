import { sql as initial } from './001-initial.js';
import { sql as sweeps } from './002-sweeps.js';

/** Forward-only schema steps for PostgreSQL; the position in this list is the schema version. Append, never edit. */
export const PG_MIGRATIONS: readonly { name: string; sql: string }[] = [
  { name: '001-initial', sql: initial },
  { name: '002-sweeps', sql: sweeps },
];

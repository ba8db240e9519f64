import { sql as initial } from './001-initial.js';
import { sql as sweeps } from './002-sweeps.js';
import { report as repoNamesReport, sql as repoNames } from './003-repo-names.js';
import { sql as resumableUploads } from './004-resumable-uploads.js';
import { sql as dataKeys } from './005-data-keys.js';
import { sql as dataKeyAges } from './006-data-key-ages.js';

/**
 * A schema step; `report`, when present, is a query run just before the step whose rows are
 * logged (with `msg`) once it committed: what the step changed that someone may want to know.
 */
export interface PgMigration {
  readonly name: string;
  readonly sql: string;
  readonly report?: { readonly msg: string; readonly sql: string };
}

/** Forward-only schema steps for PostgreSQL; the position in this list is the schema version. Append, never edit. */
export const PG_MIGRATIONS: readonly PgMigration[] = [
  { name: '001-initial', sql: initial },
  { name: '002-sweeps', sql: sweeps },
  { name: '003-repo-names', sql: repoNames, report: repoNamesReport },
  { name: '004-resumable-uploads', sql: resumableUploads },
  { name: '005-data-keys', sql: dataKeys },
  { name: '006-data-key-ages', sql: dataKeyAges },
];

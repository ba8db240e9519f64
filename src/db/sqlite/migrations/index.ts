import { sql as objects } from './001-objects.js';
import { sql as locks } from './002-locks.js';
import { sql as dashboard } from './003-dashboard.js';
import { sql as maintenance } from './004-maintenance.js';
import { sql as cluster } from './005-cluster.js';
import { sql as sweeps } from './006-sweeps.js';
import { report as repoNamesReport, sql as repoNames } from './007-repo-names.js';
import { sql as resumableUploads } from './008-resumable-uploads.js';
import { sql as dataKeys } from './009-data-keys.js';
import { sql as dataKeyAges } from './010-data-key-ages.js';

/**
 * A schema step; `report`, when present, is a query run just before the step whose rows are
 * logged (with `msg`) once it committed: what the step changed that someone may want to know.
 */
export interface Migration {
  readonly name: string;
  readonly sql: string;
  readonly report?: { readonly msg: string; readonly sql: string };
}

/** Forward-only schema steps; the position in this list is the schema version. Append, never edit. */
export const MIGRATIONS: readonly Migration[] = [
  { name: '001-objects', sql: objects },
  { name: '002-locks', sql: locks },
  { name: '003-dashboard', sql: dashboard },
  { name: '004-maintenance', sql: maintenance },
  { name: '005-cluster', sql: cluster },
  { name: '006-sweeps', sql: sweeps },
  { name: '007-repo-names', sql: repoNames, report: repoNamesReport },
  { name: '008-resumable-uploads', sql: resumableUploads },
  { name: '009-data-keys', sql: dataKeys },
  { name: '010-data-key-ages', sql: dataKeyAges },
];

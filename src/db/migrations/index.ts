import { sql as objects } from './001-objects.js';

/** Forward-only schema steps; the position in this list is the schema version. Append, never edit. */
export const MIGRATIONS: readonly { name: string; sql: string }[] = [
  { name: '001-objects', sql: objects },
];

import Database from 'better-sqlite3';

/** All remaining pages in one step: better-sqlite3 caps a step at this many. */
const ALL_PAGES = 0x7fffffff;

/**
 * Copies the live index into `destFile` with SQLite's online backup API, a consistent snapshot while
 * the server writes. One step: a stepped backup restarts whenever another connection writes between
 * steps, so under steady uploads it might never finish. Returns the pages copied.
 */
export async function backupIndex(sourceFile: string, destFile: string): Promise<number> {
  // Read-only, and no migrations: a backup never changes the index it reads.
  const db = new Database(sourceFile, { readonly: true, fileMustExist: true });
  try {
    const { totalPages } = await db.backup(destFile, { progress: () => ALL_PAGES });
    return totalPages;
  } finally {
    db.close();
  }
}

import Database from 'better-sqlite3';

/** All remaining pages in one step: better-sqlite3 caps a step at this many. */
const ALL_PAGES = 0x7fffffff;

/**
 * Copies the live index into `destFile` with SQLite's online backup API: a consistent snapshot of
 * every committed transaction (WAL included) while the server keeps writing. The copy is made in
 * one step: a step-by-step backup restarts whenever another connection writes between steps, which
 * under steady uploads could never finish. In WAL mode the one long read blocks no writer.
 * Returns the pages copied.
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

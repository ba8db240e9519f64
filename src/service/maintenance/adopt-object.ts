import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { LegacyLayout } from '../../store/types.js';
import type { MaintenanceDeps } from './maintenance-deps.js';

/**
 * Takes a legacy file just hashed to `oid` into the shared store for `repo`: hard-linked under
 * `objects/` when new (a quarantined copy moved aside first), the reference recorded once the shared
 * copy is durable, and only then the file's name removed, so a killed job loses nothing. It runs as a
 * write of the oid, so retain cannot delete the shared copy meanwhile. True when the file became the
 * shared copy; false when it was a duplicate, now freed.
 */
export async function adoptVerifiedFile(deps: MaintenanceDeps, legacy: LegacyLayout, repo: RepoName, oid: Oid, path: string, size: number): Promise<boolean> {
  const { store, objects } = deps;
  const linked = await deps.uploads.asUpload(oid, async (upload) => {
    if (await upload.quarantined()) await store.quarantine(oid);
    const adopted = await legacy.adoptFile(oid, path);
    const shared = await objects.findShared(oid);
    // Adopted by a copy through the store's layers (encryption), its stored size is the copy's, not the file's.
    const storedSize = adopted ? ((await store.stat(oid))?.storedSize ?? size) : (shared?.storedSize ?? (await store.stat(oid))?.storedSize ?? size);
    // A reference to the adopted file lifts a quarantine mark: these bytes were just proven good.
    await upload.reference(repo.key, size, storedSize, adopted);
    return adopted;
  });
  await legacy.purge(path);
  return linked;
}

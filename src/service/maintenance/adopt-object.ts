import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { LegacyLayout } from '../../store/types.js';
import type { MaintenanceDeps } from './maintenance-deps.js';

/**
 * Hard-links a verified legacy file in, records the reference, and only then removes the file's
 * name, so a killed job loses nothing; runs as a write of the oid, so retain keeps off. False: it was
 * a duplicate, now freed.
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

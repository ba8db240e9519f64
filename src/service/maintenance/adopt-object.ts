import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { LegacyLayout } from '../../store/types.js';
import type { MaintenanceDeps } from './maintenance-deps.js';

/**
 * Takes a legacy file whose bytes were just hashed to `oid` into the shared store for `repo` (the
 * disk backend's LegacyLayout): hard-linked under `objects/` when the store does not hold the oid yet
 * (a quarantined copy is moved aside first, so these good bytes take its place), the reference
 * recorded only once the shared copy is durable, and only then the file's own name removed. At every
 * instant the object is in one place or the other, so a killed job loses nothing and a second run
 * finishes. It runs as a write of the oid (the uploads' deletion gate), so retain cannot delete the
 * shared copy between finding it and recording the reference. True when the file became the shared
 * copy; false when the store already held one (the file's bytes were a duplicate and are freed).
 */
export async function adoptVerifiedFile(deps: MaintenanceDeps, legacy: LegacyLayout, repo: RepoName, oid: Oid, path: string, size: number): Promise<boolean> {
  const { store, objects } = deps;
  const linked = await deps.uploads.asUpload(oid, async (upload) => {
    if (await upload.quarantined()) await store.quarantine(oid);
    const adopted = await legacy.adoptFile(oid, path);
    const shared = await objects.findShared(oid);
    const storedSize = adopted ? size : (shared?.storedSize ?? (await store.stat(oid))?.storedSize ?? size);
    // A reference to the adopted file lifts a quarantine mark: these bytes were just proven good.
    await upload.reference(repo.key, size, storedSize, adopted);
    return adopted;
  });
  await legacy.purge(path);
  return linked;
}

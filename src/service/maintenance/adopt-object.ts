import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import type { MaintenanceDeps } from './maintenance-deps.js';

/**
 * Takes a file whose bytes were just hashed to `oid` (a legacy file for dedupe, a staged copy for
 * import) into the shared store for `repo`: hard-linked under `objects/` when the store does not hold
 * the oid yet (a quarantined copy is moved aside first, so these good bytes take its place), the
 * reference recorded only once the shared copy is durable, and only then the file's own name
 * removed. At every instant the object is in one place or the other, so a killed job loses nothing
 * and a second run finishes. True when the file became the shared copy; false when the store
 * already held one (the file's bytes were a duplicate and are freed).
 */
export async function adoptVerifiedFile(deps: MaintenanceDeps, repo: RepoName, oid: Oid, path: string, size: number): Promise<boolean> {
  const { store, objects } = deps;
  if (objects.isQuarantined(oid)) await store.quarantineFile(oid);
  const linked = await store.linkObject(oid, path);
  const shared = objects.findShared(oid);
  const storedSize = linked ? size : (shared?.storedSize ?? (await store.objectFileSize(oid)) ?? size);
  // addReference also lifts a quarantine mark: these bytes were just proven good.
  objects.addReference(repo.key, oid, size, storedSize);
  await store.purge(path);
  return linked;
}

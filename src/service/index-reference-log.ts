import type { Index } from '../db/index-types.js';
import { repoKey } from '../protocol/repo-name.js';
import type { ReferenceLog } from '../store/journal/journaling-store.js';

/** The journal's port to an index: how replay restores references and retirement records stored sizes. */
export function indexReferenceLog(index: Index): ReferenceLog {
  return {
    // A journal written before names were canonical holds them as the client spelt them.
    restore: (repo, oid, size) => index.objects.restoreReference(repoKey(repo), oid, size, size),
    isWanted: async (oid) => (await index.objects.findShared(oid)) !== null,
    stored: (oid, storedSize) => index.objects.setStoredSize(oid, storedSize),
    checkpoint: () => index.checkpoint(),
  };
}

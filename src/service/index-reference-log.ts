import type { Index } from '../db/index-types.js';
import type { ReferenceLog } from '../store/layers/journal.js';

/** The journal's port to an index: how replay restores references and retirement records stored sizes. */
export function indexReferenceLog(index: Index): ReferenceLog {
  return {
    restore: (repo, oid, size) => index.objects.restoreReference(repo, oid, size, size),
    isWanted: async (oid) => (await index.objects.findShared(oid)) !== null,
    stored: (oid, storedSize) => index.objects.setStoredSize(oid, storedSize),
    checkpoint: () => index.checkpoint(),
  };
}

import { decodeHeader, HEADER_SIZE, looksEncrypted } from '../../format/encrypted-format.js';
import type { Oid } from '../../protocol/oid.js';
import type { BlobStore } from '../../store/types.js';

/**
 * The data key id a stored copy's header names, without decrypting anything: 'plain' for a copy in
 * the clear, 'absent' when there is none, 'damaged' for a header that looks encrypted but does not
 * parse (encrypted under no known key).
 */
export async function dataKeyOf(stored: BlobStore, oid: Oid): Promise<string | 'plain' | 'absent' | 'damaged'> {
  const copy = await stored.open(oid);
  if (copy === null) return 'absent';
  try {
    const head = Buffer.alloc(Math.min(HEADER_SIZE, copy.storedSize));
    if (head.byteLength > 0) await copy.readAt(head, 0);
    if (!looksEncrypted(head, copy.storedSize)) return 'plain';
    try {
      return decodeHeader(head).dataKeyId;
    } catch {
      return 'damaged';
    }
  } finally {
    await copy.close();
  }
}

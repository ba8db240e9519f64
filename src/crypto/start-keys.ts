import type { EncryptionConfig } from '../config/schema.js';
import type { DataKeyIndex } from '../db/index-types.js';
import { StartRefusedError } from '../errors/start-refused.js';
import { chooseFrameCipher } from './frame-gcm.js';
import { KeyRing, KeyRingError } from './key-ring.js';

/**
 * The key ring for this start, or null when no key is given (and the frame cipher it is to use:
 * SVC_ENCRYPTION_CIPHER). Refuses the start (StartRefusedError:
 * one line, exit 2) when the keys cannot be read, or when the index holds data keys wrapped with a
 * key the ring lacks: those objects could not be read, and writing on would hide the problem.
 */
export async function openKeyRing(config: EncryptionConfig, keys: DataKeyIndex): Promise<KeyRing | null> {
  chooseFrameCipher(config.cipher);
  let ring: KeyRing | null;
  try {
    ring = await KeyRing.load({ file: config.keyFile, command: config.keyCommand });
  } catch (e) {
    if (e instanceof KeyRingError) throw new StartRefusedError(`encryption keys: ${e.message}`);
    throw e;
  }
  const missing = (await keys.kekIdsInUse()).filter((id) => ring === null || !ring.has(id));
  if (missing.length > 0) {
    const where = ring === null ? 'no encryption key is given (SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND)' : 'the key ring lacks it';
    throw new StartRefusedError(`encryption keys: objects are encrypted under key ${missing.join(', ')} and ${where}`);
  }
  return ring;
}

import { createHmac, randomBytes } from 'node:crypto';
import type { SettingsIndex } from '../db/index-types.js';

/**
 * A key every node sharing the index derives alike: 32 random bytes the first node writes to the
 * index's settings, HMAC'd with `purpose` so one secret serves several uses. Credentials cannot
 * serve: the AWS chain's rotate and differ per node.
 */
export async function sharedKey(settings: SettingsIndex, purpose: string): Promise<Buffer> {
  const row = await settings.putIfAbsent(SECRET_KEY, { secret: randomBytes(32).toString('base64url') }, 'stowage', Date.now());
  const secret = (row.value as { secret?: unknown } | null)?.secret;
  if (typeof secret !== 'string' || secret.length < 32) throw new Error(`the index's ${SECRET_KEY} setting is not a secret this server wrote`);
  return createHmac('sha256', secret).update(purpose).digest();
}

/** The settings key holding it (never shown by the dashboard, which reads only `access`). */
const SECRET_KEY = 'server_secret';

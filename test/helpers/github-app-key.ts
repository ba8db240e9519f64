import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import { tmpDir } from './start-server.js';

/**
 * A GitHub App's key pair: the private key written where SVC_FORGE_A_APP_KEY_FILE can name it
 * (PKCS#1 PEM, mode 0600, removed after `t`), the public key for the emulator to check JWTs with.
 */
export function appKey(t: Test): { readonly keyFile: string; readonly publicKey: KeyObject } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const dir = tmpDir('stowage-app-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const keyFile = join(dir, 'app.pem');
  writeFileSync(keyFile, privateKey.export({ type: 'pkcs1', format: 'pem' }), { mode: 0o600 });
  return { keyFile, publicKey };
}

import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { DEFAULTS } from '../../src/config/schema.js';
import { ERROR_CODES } from '../../src/errors/codes.js';

// design.md rule 3 and 7: every error code and every variable is documented, and the README names
// no code or variable that no longer exists (fastify's Errors.md parity test).
const readme = readFileSync(resolve(dirname(fileURLToPath(import.meta.url)), '../../../README.md'), 'utf8');

t.test('every error code is in the README with its status, and no stale code is', async (t) => {
  for (const [code, { status }] of Object.entries(ERROR_CODES)) {
    t.match(readme, new RegExp(`\\| \`${code}\` \\| ${status} \\|`), `${code} documented as ${status}`);
  }
  for (const [, code] of readme.matchAll(/`(LFS_ERR_[A-Z_]+)`/g)) {
    t.ok(code! in ERROR_CODES, `${code} in README exists in codes.ts`);
  }
});

t.test('every configuration variable is in the README table, and no stale one is', async (t) => {
  for (const name of Object.keys(DEFAULTS)) t.match(readme, new RegExp(`^\\| \`${name}\` \\|`, 'm'), `${name} documented`);
  for (const [, name] of readme.matchAll(/^\| `(SVC_[A-Z0-9_]+)` \|/gm)) t.ok(name! in DEFAULTS, `${name} in README exists in schema.ts`);
});

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { DEFAULTS } from '../../src/config/schema.js';
import { ERROR_CODES } from '../../src/errors/codes.js';

// Every error code and every variable is documented, and the docs name no code or variable that no
// longer exists (fastify's Errors.md parity test). The configuration table is in the README; the
// error table in docs/behaviour.md. The repository stands on its own: every path it cites exists,
// and it cites no document kept outside it.
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const readme = readFileSync(resolve(root, 'README.md'), 'utf8');
const behaviour = readFileSync(resolve(root, 'docs/behaviour.md'), 'utf8');
/** Where an error code may be named: the README and the docs it sends readers to. */
const prose = ['README.md', 'docs/behaviour.md', 'docs/operations.md', 'docs/ci.md', 'docs/architecture.md'].map((f) => [f, readFileSync(resolve(root, f), 'utf8')] as const);

t.test('every error code is in the error table of docs/behaviour.md with its status, and no stale code is named', async (t) => {
  for (const [code, { status }] of Object.entries(ERROR_CODES)) {
    t.match(behaviour, new RegExp(`^\\| \`${code}\` \\| ${status} \\|`, 'm'), `${code} documented as ${status}`);
  }
  for (const [file, text] of prose) {
    for (const [, code] of text.matchAll(/`(LFS_ERR_[A-Z_]+)`/g)) t.ok(code! in ERROR_CODES, `${code} in ${file} exists in codes.ts`);
  }
});

t.test('every configuration variable is in the README table, and no stale one is', async (t) => {
  for (const name of Object.keys(DEFAULTS)) t.match(readme, new RegExp(`^\\| \`${name}\` \\|`, 'm'), `${name} documented`);
  for (const [, name] of readme.matchAll(/^\| `(SVC_[A-Z0-9_]+)` \|/gm)) t.ok(name! in DEFAULTS, `${name} in README exists in schema.ts`);
});

t.test('the README stays short enough for a newcomer', async (t) => {
  const lines = readme.split('\n').length;
  t.ok(lines <= 250, `README.md has ${lines} lines (at most 250; details go to docs/)`);
});

t.test('every relative link in the README and the docs written with it points at a file that exists', async (t) => {
  for (const [file, text] of prose) {
    for (const [, target] of text.matchAll(/\]\((?!https?:|#)([^)#\s]+)(?:#[^)]*)?\)/g)) {
      const path = resolve(root, dirname(file), target!);
      let ok = true;
      try {
        readFileSync(path);
      } catch (e) {
        ok = (e as NodeJS.ErrnoException).code === 'EISDIR';
      }
      t.ok(ok, `${file} → ${target}`);
    }
  }
});

/** Every file of src/, test/ and docs/, and the README: where the repository cites paths. */
const cited = [...['src', 'test', 'docs'].flatMap((dir) => (readdirSync(resolve(root, dir), { recursive: true, withFileTypes: true }))
  .filter((e) => e.isFile())
  .map((e) => relative(root, join(e.parentPath ?? e.path, e.name)))), 'README.md']
  .sort()
  .map((file) => [file, readFileSync(resolve(root, file), 'utf8')] as const);

/** `a/{b,c}.md` → `a/b.md`, `a/c.md` (one brace group, as the docs write it). */
const expandBraces = (p: string): string[] => {
  const m = /^(.*)\{([^}]*)\}(.*)$/.exec(p);
  return m === null ? [p] : m[2]!.split(',').map((alt) => `${m[1]}${alt}${m[3]}`);
};
/** Whether a path exists; `*` matches within one name. Built files (`…/dist/x.js`) exist as their source `x.ts`. */
const exists = (p: string): boolean => {
  const source = p.replace(/(^|\/)dist\/(.*)\.js$/, '$1$2.ts');
  if (!source.includes('*')) return existsSync(resolve(root, source));
  const dir = dirname(source);
  const name = new RegExp(`^${source.slice(dir.length + 1).replace(/[.+?^$()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
  return !dir.includes('*') && existsSync(resolve(root, dir)) && readdirSync(resolve(root, dir)).some((n) => name.test(n));
};

t.test('every repository path cited in src/, test/, docs/ and the README exists', async (t) => {
  // A path of our own, not the tail of a URL, an import (`../../src/…`) or another project's path.
  const pathPattern = /(?<![\w./@-])((?:src|test|docs|deploy|native-bench|scripts)\/(?:[\w./*-]|\{[\w.,-]*\})*(?:[\w*]|\{[\w.,-]*\}))/g;
  let checked = 0;
  const missing: string[] = [];
  for (const [file, text] of cited) {
    for (const [, path] of text.matchAll(pathPattern)) {
      for (const p of expandBraces(path!.replace(/\.+$/, ''))) {
        checked++;
        if (!exists(p)) missing.push(`${file} cites ${p}`);
      }
    }
  }
  t.same(missing, [], 'every cited path exists');
  t.ok(checked > 100, `${checked} cited paths checked`);
});

t.test('no document kept outside the repository is cited', async (t) => {
  const outside: ReadonlyArray<readonly [string, RegExp]> = [
    ['a sibling folder', /\.\.\/shared\b|\bshared\//],
    ['the design notes', /design\.md|design[ ]§|design[ ]rule/],
    ['the forge notes', /forges\.md/],
    ['the client notes', /git-lfs-client\.md|client[ ]doc[ ]\(/],
    ['the service specification', /service[-]spec|\bspec[ ].{0,30}rule/i],
  ];
  const found: string[] = [];
  for (const [file, text] of cited) {
    text.split('\n').forEach((line, i) => {
      for (const [what, pattern] of outside) if (pattern.test(line)) found.push(`${file}:${i + 1} cites ${what}`);
    });
  }
  t.same(found, [], `none in ${cited.length} files`);
});

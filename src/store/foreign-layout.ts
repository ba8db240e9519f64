import type { Dir } from 'node:fs';
import { lstat, opendir, realpath, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { parseOid, type Oid } from '../protocol/oid.js';

/**
 * How a server names an object's file under its content root: always `ab/cd/<name>` (the first two
 * pairs of hex digits as folders), where `<name>` is either the whole oid or the oid without its
 * first four digits.
 */
export type ObjectFileName = 'full' | 'rest';

/**
 * The on-disk layouts `import` reads, each checked against the other server's source:
 * - gitea modules/lfs/pointer.go `RelativePath`: `path.Join(oid[0:2], oid[2:4], oid[4:])` (Forgejo
 *   kept it), under `[lfs] PATH` (default `data/lfs`);
 * - gitlab app/uploaders/lfs_object_uploader.rb: `store_dir` is `oid[0,2]/oid[2,2]`, `filename` is
 *   `oid[4..-1]`, under the `lfs-objects` folder of GitLab's `shared` directory;
 * - git-lfs/lfs-test-server content_store.go `transformKey`: `key[0:2]/key[2:4]/key[4:]`, under
 *   `LFS_CONTENTPATH` (default `lfs-content`);
 * - the git-lfs client's own `.git/lfs/objects` (and Stowage's legacy folder): `ab/cd/<oid>`.
 */
export const IMPORT_LAYOUTS = {
  gitea: 'rest',
  forgejo: 'rest',
  gitlab: 'rest',
  'lfs-test-server': 'rest',
  'git-lfs': 'full',
} as const satisfies Record<string, ObjectFileName>;

export type ImportLayout = keyof typeof IMPORT_LAYOUTS;

/** A layout named by a request, or null for anything else. */
export function parseImportLayout(value: unknown): ImportLayout | null {
  return typeof value === 'string' && Object.hasOwn(IMPORT_LAYOUTS, value) ? (value as ImportLayout) : null;
}

/**
 * Why a file under a content root is not an object of its layout:
 * - `not_an_object`: its name or place is not `ab/cd/<name>` with the right digits;
 * - `other_layout`: it is named as the *other* file-name form would name an object (an oid without
 *   its first four digits in a whole-oid tree, or the reverse), so the wrong layout was chosen;
 * - `not_a_file`: a symbolic link, socket or device (never followed);
 * - `unreadable`: a folder that could not be listed;
 * - `set_aside`: a `<oid>.refused` / `<oid>.corrupt` file a maintenance job renamed on purpose.
 */
export type StrayReason = 'not_an_object' | 'other_layout' | 'not_a_file' | 'unreadable' | 'set_aside';

/** One entry met walking a content root; `rel` is its path under the root, with `/` separators. */
export type LayoutEntry =
  | { readonly kind: 'object'; readonly oid: Oid; readonly path: string; readonly rel: string; readonly size: number; readonly mtimeMs: number }
  | { readonly kind: 'stray'; readonly path: string; readonly rel: string; readonly reason: StrayReason };

const PAIR_RE = /^[0-9a-f]{2}$/;
const REST_RE = /^[0-9a-f]{60}$/;
const SET_ASIDE_RE = /^[0-9a-f]{64}\.(refused|corrupt)$/;

/** The oid a file's place names in a layout, or why it names none. */
export function classifyObjectPath(parts: readonly string[], form: ObjectFileName): { readonly oid: Oid } | { readonly stray: StrayReason } {
  if (parts.length !== 3 || !PAIR_RE.test(parts[0]!) || !PAIR_RE.test(parts[1]!)) return { stray: 'not_an_object' };
  const [a, b, name] = parts as [string, string, string];
  const full = parseOid(name);
  const rest = REST_RE.test(name) ? parseOid(a + b + name) : null;
  if (form === 'full') {
    if (full !== null && full.startsWith(a + b)) return { oid: full };
    if (SET_ASIDE_RE.test(name) && name.startsWith(a + b)) return { stray: 'set_aside' };
    return { stray: rest !== null ? 'other_layout' : 'not_an_object' };
  }
  if (rest !== null) return { oid: rest };
  return { stray: full !== null && full.startsWith(a + b) ? 'other_layout' : 'not_an_object' };
}

/**
 * Every entry under `root`, one at a time: each folder is read as a stream (opendir), so memory
 * stays bounded by the depth of the tree whatever the number of files. Symbolic links are reported,
 * never followed, so the walk cannot leave `root`. A missing root yields nothing. Ending the
 * iteration early (return()) closes the folders it holds open.
 */
export async function* walkLayout(root: string, form: ObjectFileName): AsyncGenerator<LayoutEntry> {
  yield* walkFolder(root, [], form);
}

async function* walkFolder(dir: string, parts: readonly string[], form: ObjectFileName): AsyncGenerator<LayoutEntry> {
  let handle: Dir;
  try {
    handle = await opendir(dir, { bufferSize: 256 });
  } catch (e) {
    if (parts.length === 0 && (e as NodeJS.ErrnoException).code === 'ENOENT') return;
    yield { kind: 'stray', path: dir, rel: parts.join('/') || '.', reason: 'unreadable' };
    return;
  }
  for await (const d of handle) {
    const here = [...parts, d.name];
    const path = join(dir, d.name);
    const rel = here.join('/');
    if (d.isDirectory()) {
      yield* walkFolder(path, here, form);
      continue;
    }
    if (!d.isFile()) {
      yield { kind: 'stray', path, rel, reason: 'not_a_file' };
      continue;
    }
    const named = classifyObjectPath(here, form);
    if ('stray' in named) {
      yield { kind: 'stray', path, rel, reason: named.stray };
      continue;
    }
    const st = await lstat(path).catch(() => null);
    if (st === null || !st.isFile()) continue; // removed (or replaced) since the folder was listed: not there any more
    yield { kind: 'object', oid: named.oid, path, rel, size: st.size, mtimeMs: st.mtimeMs };
  }
}

/** A folder an import may read, or why the named one may not be read. */
export type ImportSource = { readonly path: string } | { readonly problem: string };

const SOURCE_SEGMENT_RE = /^[A-Za-z0-9._@+=,-]{1,255}$/;

/**
 * Resolves `source`, a folder named relative to the import root (SVC_IMPORT_DIR), to a real path
 * that is the root or inside it. Only plain path segments are accepted (no absolute path, no dot
 * segments), and the real path is checked after symbolic links are resolved, so neither `..` nor a
 * link can point an import outside the folder the operator allowed.
 */
export async function resolveImportSource(root: string, source: string): Promise<ImportSource> {
  if (source.startsWith('/')) return { problem: 'source must be a folder relative to SVC_IMPORT_DIR, not an absolute path' };
  const parts = source.split('/').filter((p) => p !== '');
  if (parts.length > 32 || parts.some((p) => !SOURCE_SEGMENT_RE.test(p) || /^\.+$/.test(p))) {
    return { problem: 'source must be plain folder names separated by / (letters, digits, . _ - @ + = ,; no . or .. segments)' };
  }
  let base: string;
  try {
    base = await realpath(root);
  } catch {
    return { problem: 'SVC_IMPORT_DIR does not exist on the server' };
  }
  let real: string;
  try {
    real = await realpath(join(base, ...parts));
  } catch {
    return { problem: `No folder ${JSON.stringify(parts.join('/'))} in SVC_IMPORT_DIR` };
  }
  if (real !== base && !real.startsWith(base + sep)) return { problem: 'source resolves outside SVC_IMPORT_DIR' };
  const st = await stat(real).catch(() => null);
  if (st === null || !st.isDirectory()) return { problem: `${JSON.stringify(parts.join('/'))} in SVC_IMPORT_DIR is not a folder` };
  return { path: real };
}

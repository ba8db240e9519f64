import type { Dir } from 'node:fs';
import { lstat, opendir, realpath, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { parseOid, type Oid } from '../protocol/oid.js';

/** How a server names an object's file: `ab/cd/<name>`, `<name>` the whole oid or all but its first four digits. */
export type ObjectFileName = 'full' | 'rest';

/**
 * The layouts `import` reads, checked against each server's source: Gitea/Forgejo
 * (modules/lfs/pointer.go), GitLab (app/uploaders/lfs_object_uploader.rb) and lfs-test-server
 * (content_store.go) name `ab/cd/<oid[4:]>`; the git-lfs client's `.git/lfs/objects`, `ab/cd/<oid>`.
 */
export const IMPORT_LAYOUTS = {
  gitea: 'rest',
  forgejo: 'rest',
  gitlab: 'rest',
  'lfs-test-server': 'rest',
  'git-lfs': 'full',
} as const satisfies Record<string, ObjectFileName>;

export type ImportLayout = keyof typeof IMPORT_LAYOUTS;

export function parseImportLayout(value: unknown): ImportLayout | null {
  return typeof value === 'string' && Object.hasOwn(IMPORT_LAYOUTS, value) ? (value as ImportLayout) : null;
}

/**
 * Why a file under a content root is not an object of its layout: `other_layout` means it is named as
 * the other file-name form would name an object, so the wrong layout was chosen; `set_aside` is a
 * `<oid>.refused` / `<oid>.corrupt` file a maintenance job renamed; symbolic links are `not_a_file`.
 */
export type StrayReason = 'not_an_object' | 'other_layout' | 'not_a_file' | 'unreadable' | 'set_aside';

/** One entry met walking a content root; `rel` is its path under the root, with `/` separators. */
export type LayoutEntry =
  | { readonly kind: 'object'; readonly oid: Oid; readonly path: string; readonly rel: string; readonly size: number; readonly mtimeMs: number }
  | { readonly kind: 'stray'; readonly path: string; readonly rel: string; readonly reason: StrayReason };

const PAIR_RE = /^[0-9a-f]{2}$/;
const REST_RE = /^[0-9a-f]{60}$/;
const SET_ASIDE_RE = /^[0-9a-f]{64}\.(refused|corrupt)$/;

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

/** Every entry under `root`, one at a time (opendir streams: memory bounded by depth); links are reported, never followed. */
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

export type ImportSource = { readonly path: string } | { readonly problem: string };

const SOURCE_SEGMENT_RE = /^[A-Za-z0-9._@+=,-]{1,255}$/;

/** Resolves `source` (relative to SVC_IMPORT_DIR) to a real path inside it, checked after links are resolved, so neither `..` nor a link leads outside. */
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

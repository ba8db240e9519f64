import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { CliError, EXIT, type Client } from './client.js';
import type { Io } from './jobs.js';
import { bytes } from './output.js';

const exec = promisify(execFile);

/** A Git LFS pointer file is at most this long (spec: "less than 1024 bytes"). */
const MAX_POINTER_BYTES = 1024;
const POINTER_RE = /^version https:\/\/git-lfs\.github\.com\/spec\/v1\noid sha256:([0-9a-f]{64})\nsize (\d{1,16})\n/;
/** Objects per batch request (git-lfs sends at most 100). */
const BATCH = 100;
/** Downloads at once, as git-lfs's default lfs.concurrenttransfers. */
const PARALLEL = 8;

export interface LfsObject {
  readonly oid: string;
  readonly size: number;
}

/**
 * The LFS objects the tree of `ref` points at, read from the clone in `cwd` with git alone (no
 * smudge, no download): the tree's small blobs, those that are pointer files.
 */
export async function pointersAt(cwd: string, ref: string): Promise<LfsObject[]> {
  if (ref.startsWith('-')) throw new CliError(`cache warm: not a ref: ${ref}`, EXIT.usage);
  const { stdout } = await exec('git', ['ls-tree', '-r', '-l', '-z', ref, '--'], { cwd, maxBuffer: 512 << 20 }).catch((e: Error) => {
    throw new CliError(`cache warm: git ls-tree ${ref} failed in ${cwd}: ${e.message.split('\n')[0]}`, EXIT.usage);
  });
  const ids = stdout.split('\0').flatMap((entry) => {
    const m = /^\d+ blob ([0-9a-f]{40,64}) +(\d+)\t/.exec(entry);
    return m !== null && Number(m[2]) < MAX_POINTER_BYTES ? [m[1]!] : [];
  });
  if (ids.length === 0) return [];
  const text = await new Promise<string>((resolve, reject) => {
    const child = spawn('git', ['cat-file', '--batch'], { cwd, stdio: ['pipe', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new CliError('cache warm: git cat-file failed', EXIT.failed))));
    child.stdin.end(`${ids.join('\n')}\n`);
  });
  const found = new Map<string, number>();
  // Each answer: "<id> blob <size>\n<content>\n".
  let at = 0;
  while (at < text.length) {
    const head = text.indexOf('\n', at);
    const m = /^[0-9a-f]+ blob (\d+)$/.exec(text.slice(at, head));
    if (m === null) break;
    const content = text.slice(head + 1, head + 1 + Number(m[1]));
    const p = POINTER_RE.exec(content);
    if (p !== null) found.set(p[1]!, Number(p[2]));
    at = head + 1 + Number(m[1]) + 1;
  }
  return [...found].map(([oid, size]) => ({ oid, size }));
}

/** `stowage cache warm`: fetches every object of `ref` through the cache once, before the clones need them. */
export async function warmCache(client: Client, cwd: string, ref: string, io: Io): Promise<number> {
  const objects = await pointersAt(cwd, ref);
  if (!io.quiet) io.err.write(`${objects.length} LFS objects at ${ref}\n`);
  let done = 0;
  let total = 0;
  let refused = 0;
  for (let i = 0; i < objects.length; i += BATCH) {
    const group = objects.slice(i, i + BATCH);
    const answer = await client.call('POST', 'objects/batch', { operation: 'download', transfers: ['basic'], objects: group, hash_algo: 'sha256' });
    const links = ((answer.json?.objects ?? []) as { oid: string; actions?: { download?: { href?: string } } }[]).flatMap((o) => {
      const href = o.actions?.download?.href;
      if (typeof href !== 'string') refused++;
      return typeof href === 'string' ? [href] : [];
    });
    for (let j = 0; j < links.length; j += PARALLEL) {
      const got = await Promise.all(links.slice(j, j + PARALLEL).map((href) => client.download(href)));
      done += got.length;
      total += got.reduce((a, b) => a + b, 0);
    }
    if (!io.quiet) io.err.write(`\r${done}/${objects.length} objects, ${bytes(total)}`);
  }
  if (!io.quiet) io.err.write('\n');
  if (io.json) io.out.write(`${JSON.stringify({ ref, objects: objects.length, warmed: done, refused, bytes: total })}\n`);
  else io.out.write(`${done} objects warmed (${bytes(total)})${refused > 0 ? `, ${refused} refused by the upstream` : ''}\n`);
  return refused > 0 ? EXIT.problems : EXIT.ok;
}

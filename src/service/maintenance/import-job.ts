import { open } from 'node:fs/promises';
import { isLfsError } from '../../errors/errors.js';
import type { Oid } from '../../protocol/oid.js';
import type { RepoName } from '../../protocol/repo-name.js';
import { IMPORT_LAYOUTS, walkLayout, type ImportLayout, type LayoutEntry, type StrayReason } from '../../store/foreign-layout.js';
import type { PutResult } from '../../store/types.js';
import type { JobContext } from './job-runner.js';
import { LISTED_MAX, type MaintenanceDeps } from './maintenance-deps.js';
import { pumpInto } from './object-io.js';
import { forEachLimitedAsync } from './worker-tasks.js';

const READ_CHUNK = 1 << 20;

/** Why an import refused a file: a StrayReason, or the two found by reading it. */
export type RefusedReason = Exclude<StrayReason, 'set_aside'> | 'digest_mismatch' | 'unreadable';

export interface ImportReport {
  [key: string]: unknown;
  readonly layout: ImportLayout;
  readonly source: string;
  readonly dry_run: boolean;
  readonly files: number;
  readonly vanished: number;
  readonly imported: number;
  readonly copied: number;
  readonly already_stored: number;
  readonly bytes: number;
  readonly bytes_copied: number;
  /** Files not imported: never silently passed over. */
  readonly refused: number;
  /** Refused files by reason (the counts are complete; the list stops at LISTED_MAX). */
  readonly refused_by_reason: Partial<Record<RefusedReason, number>>;
  readonly refused_files: readonly { readonly path: string; readonly reason: RefusedReason; readonly oid?: string }[];
  readonly complete: boolean;
}

export interface ImportRequest {
  readonly layout: ImportLayout;
  readonly path: string;
  readonly source: string;
  readonly dryRun: boolean;
}

/**
 * Import: another LFS server's content folder (read only) into `repo`, each file through the store
 * stack as an upload, so a bad file is refused and reported. Walked twice (count, then import), one
 * folder at a time; safe to run again.
 */
export async function runImport(deps: MaintenanceDeps, repo: RepoName, req: ImportRequest, ctx: JobContext): Promise<ImportReport> {
  const { objects, tasks } = deps;
  const form = IMPORT_LAYOUTS[req.layout];
  let filesTotal = 0;
  let bytesTotal = 0;
  for await (const e of walkLayout(req.path, form)) {
    if (ctx.signal.aborted) break;
    filesTotal++;
    if (e.kind === 'object') bytesTotal += e.size;
  }
  ctx.progress.objectsTotal = filesTotal;
  ctx.progress.bytesTotal = bytesTotal;

  let files = 0;
  let vanished = 0;
  let imported = 0;
  let copied = 0;
  let already = 0;
  let bytes = 0;
  let bytesCopied = 0;
  let refused = 0;
  const byReason: Partial<Record<RefusedReason, number>> = {};
  const listed: { path: string; reason: RefusedReason; oid?: string }[] = [];
  const refuse = (e: LayoutEntry, reason: RefusedReason): void => {
    refused++;
    byReason[reason] = (byReason[reason] ?? 0) + 1;
    if (listed.length < LISTED_MAX) listed.push(e.kind === 'object' ? { path: e.rel, reason, oid: e.oid } : { path: e.rel, reason });
  };
  const done = (e: LayoutEntry): void => {
    files++;
    ctx.progress.objectDone(e.kind === 'object' ? e.size : 0);
  };
  const held = async (oid: Oid): Promise<boolean> => (await objects.findShared(oid)) !== null && !(await objects.isQuarantined(oid));

  const complete = await forEachLimitedAsync(walkLayout(req.path, form), tasks.parallelism, ctx.signal, async (e) => {
    try {
      if (e.kind === 'stray') {
        // A set-aside name is only meaningful in Stowage's own legacy folder; here it is just not an object.
        refuse(e, e.reason === 'set_aside' ? 'not_an_object' : e.reason);
        return;
      }
      if (req.dryRun || (await held(e.oid))) {
        // Nothing to copy (or a dry run): the file is still read whole, so a corrupt one is refused.
        const r = await tasks.hash(e.path);
        if (r.outcome === 'missing') return void vanished++; // removed since the walk listed it
        if (r.outcome !== 'ok') return refuse(e, 'unreadable');
        if (r.sha256 !== e.oid) return refuse(e, 'digest_mismatch');
        if (req.dryRun) {
          imported++;
          bytes += r.size;
          if (await held(e.oid)) already++;
          else {
            copied++;
            bytesCopied += r.size;
          }
          return;
        }
        // As a write of the oid: retain (on any node) cannot take the bytes between the check and the reference.
        const referenced = await deps.uploads.asUpload(e.oid, async (upload) => {
          const shared = await objects.findShared(e.oid);
          if (shared === null || (await objects.isQuarantined(e.oid))) return false;
          // The store's copy was not read here: a quarantine mark set meanwhile refuses the reference.
          await upload.reference(repo.key, r.size, shared.storedSize, false);
          return true;
        });
        if (referenced) {
          imported++;
          already++;
          bytes += r.size;
          return;
        }
        // Taken by retain while the file was read: store it after all.
      }
      const put = await storeFile(deps, repo, e.oid, e.path);
      if (put === 'missing') return void vanished++;
      if (put === 'digest_mismatch' || put === 'unreadable') return refuse(e, put);
      imported++;
      bytes += put.size;
      if (put.created) {
        copied++;
        bytesCopied += put.size;
      } else already++;
    } finally {
      done(e);
    }
  });
  return {
    layout: req.layout,
    source: req.source,
    dry_run: req.dryRun,
    files,
    vanished,
    imported,
    copied,
    already_stored: already,
    bytes,
    bytes_copied: bytesCopied,
    refused,
    refused_by_reason: byReason,
    refused_files: listed,
    complete,
  };
}

/** Writes a source file as an upload of `oid`, then records the reference; a write failure fails the job, a bad file is returned. */
async function storeFile(deps: MaintenanceDeps, repo: RepoName, oid: Oid, path: string): Promise<PutResult | 'missing' | 'unreadable' | 'digest_mismatch'> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : 'unreadable';
  }
  const buf = Buffer.allocUnsafe(READ_CHUNK);
  let readFailed = false;
  let position = 0;
  const pull = async (): Promise<Uint8Array | null> => {
    try {
      const { bytesRead } = await fh.read(buf, 0, READ_CHUNK, position);
      position += bytesRead;
      return bytesRead === 0 ? null : buf.subarray(0, bytesRead);
    } catch (e) {
      readFailed = true;
      throw e;
    }
  };
  try {
    // New object bytes, as an upload's: refused (507) where they would enter the disk's reserve.
    deps.uploads.admitBytes((await fh.stat()).size);
    return await deps.uploads.asUpload(oid, async (upload) => {
      // As an upload: a quarantined oid's bad bytes go aside so these are stored.
      if (await deps.objects.isQuarantined(oid)) await deps.store.quarantine(oid);
      const journal = deps.store.journal;
      const writer = journal === null ? await deps.store.createWriter(oid, { expectedSize: null }) : await journal.createWriter(repo.key, oid, { expectedSize: null });
      const put = await pumpInto(pull, writer, () => undefined);
      // A reference to bytes just stored lifts a quarantine mark: they were verified on the way in.
      await upload.reference(repo.key, put.size, put.storedSize, put.created);
      return put;
    });
  } catch (e) {
    if (readFailed) return 'unreadable';
    if (isLfsError(e) && e.code === 'LFS_ERR_DIGEST_MISMATCH') return 'digest_mismatch';
    throw e;
  } finally {
    await fh.close();
  }
}

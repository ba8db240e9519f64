import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CliError, EXIT, SERVER_WIDE, type Client } from './client.js';
import { cancelJob, finalStatus, follow, jobId, listJobs, startAndFollow, type Io, type JobJson } from './jobs.js';
import { runMigrate, type LocalContext } from './migrate-command.js';
import { bytes, duration } from './output.js';
import { warmCache } from './cache-warm.js';

const exec = promisify(execFile);

/** One option of a command, in node:util parseArgs's form plus its help line. */
export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  readonly help: string;
  readonly arg?: string;
}

/** What a command runs with, once its arguments are parsed and its repository and client resolved. */
export interface RunContext {
  readonly client: Client;
  readonly values: Record<string, string | boolean | undefined>;
  /** Positionals after the repository (job commands: the sub-command and id). */
  readonly rest: readonly string[];
  readonly io: Io;
  readonly cwd: string;
}

/**
 * A command: its help, its options, and what it does: `run` through a server's HTTP API, or `local`
 * on the data directory itself (no repository, no server). `serve` has neither (cli.ts starts the server).
 */
export interface CommandSpec {
  readonly usage: string;
  readonly summary: string;
  readonly details: string;
  readonly options: Record<string, OptionSpec>;
  readonly run?: (ctx: RunContext) => Promise<number>;
  readonly local?: (ctx: LocalContext) => Promise<number>;
  /** Works on the whole server (its routes under /-/): no repository is named or looked up. */
  readonly serverWide?: boolean;
}

/** Options every command that talks to a server takes. */
export const REMOTE_OPTIONS: Record<string, OptionSpec> = {
  server: { type: 'string', arg: 'URL', help: 'server base URL (default: STOWAGE_URL, else the clone\'s LFS endpoint)' },
  json: { type: 'boolean', help: 'print the result as one JSON document on stdout (for scripts)' },
  quiet: { type: 'boolean', short: 'q', help: 'no progress (errors still go to stderr)' },
};

/** Prints a job's result: JSON for scripts, a short summary for people; returns the exit status. */
function finish(j: JobJson | null, io: Io, summary: (r: Record<string, any>) => string): number {
  if (j === null) return EXIT.interrupted;
  const r = j.report ?? {};
  if (io.json) io.out.write(`${JSON.stringify({ ...r, job: j.id, state: j.state, outcome: j.outcome })}\n`);
  else if (j.report !== null) {
    const mark = j.outcome === 'clean' ? io.paint.green('ok') : j.outcome === 'problems' ? io.paint.red('PROBLEMS') : io.paint.yellow(j.state);
    io.out.write(`${mark} ${j.repository === SERVER_WIDE ? 'server' : j.repository}: ${summary(r)} (${duration((Date.parse(j.finished_at ?? '') - Date.parse(j.started_at)) / 1000)})\n`);
  }
  return finalStatus(j, io);
}

/** The objects a report names (corrupt, unreadable, refused), a few of them, under the summary. */
function listed(io: Io, r: Record<string, any> | null | undefined): void {
  if (io.json || r === null || r === undefined) return;
  for (const [field, label] of [['corrupt_objects', 'corrupt   '], ['unreadable_objects', 'unreadable'], ['refused_objects', 'refused']] as const) {
    const items = (r[field] ?? []) as ({ oid: string; detail?: string } | string)[];
    for (const it of items.slice(0, 20)) {
      const o = typeof it === 'string' ? { oid: it, detail: '' } : it;
      io.out.write(`  ${io.paint.red(label)}  ${o.oid}  ${o.detail ?? ''}`.trimEnd() + '\n');
    }
    if (items.length > 20) io.out.write(`  … and ${items.length - 20} more (--json lists them all)\n`);
  }
  // Files of a folder that were not taken (import, dedupe): their path and why, as the job lists them.
  const files = (r.refused_files ?? []) as { path: string; reason: string }[];
  for (const f of files.slice(0, 20)) io.out.write(`  ${io.paint.red('refused')}  ${f.path}  ${f.reason}\n`);
  if (files.length > 20) io.out.write(`  … and ${files.length - 20} more (--json lists them all)\n`);
}

/** A command that starts one job, follows it, and prints its summary and the objects it names. */
function jobCommand(kind: string, body: (v: RunContext['values']) => object, summary: (r: Record<string, any>) => string): (ctx: RunContext) => Promise<number> {
  return async ({ client, values, io }) => {
    const j = await startAndFollow(client, kind, body(values), io);
    const code = finish(j, io, summary);
    listed(io, j?.report);
    return code;
  };
}

/** Every oid the clone's history references, from all refs: refuses a shallow clone (it would miss some). */
async function referencedOids(cwd: string): Promise<string[]> {
  const shallow = await exec('git', ['rev-parse', '--is-shallow-repository'], { cwd }).catch((e: Error) => {
    throw new CliError(`retain must run inside a git clone: ${e.message.split('\n')[0]}`, EXIT.usage);
  });
  if (shallow.stdout.trim() === 'true') throw new CliError('refusing a shallow clone: it does not see every commit, so retain would drop objects still in use (git fetch --unshallow)', EXIT.usage);
  const { stdout } = await exec('git', ['lfs', 'ls-files', '--all', '--long'], { cwd, maxBuffer: 1 << 30 });
  const oids = new Set<string>();
  for (const line of stdout.split('\n')) {
    const m = /^([0-9a-f]{64}) /.exec(line);
    if (m) oids.add(m[1]!);
  }
  return [...oids];
}

function statsSummary(s: any): string {
  const lines = [
    `${s.repository}`,
    `  objects     ${s.objects}  (${bytes(s.logical_bytes)} as uploaded, ${bytes(s.stored_bytes)} stored, ${(100 * s.saving_ratio).toFixed(0)}% saved)`,
  ];
  const big = (s.largest_objects ?? [])[0];
  if (big !== undefined) lines.push(`  largest     ${bytes(big.size)}  ${big.oid.slice(0, 12)}…`);
  if (s.locks?.available) lines.push(`  locks       ${s.locks.total}${s.locks.items.some((l: any) => l.stale) ? ` (${s.locks.items.filter((l: any) => l.stale).length} stale)` : ''}`);
  const a = s.last_audit;
  lines.push(
    a === null
      ? '  last audit  never (stowage audit)'
      : `  last audit  ${a.finished_at.replace('T', ' ').slice(0, 16)} UTC: ${a.ok ? 'clean' : `${a.corrupt} corrupt, ${a.unreadable} unreadable${a.complete ? '' : ', incomplete'}`} (${a.objects} objects, ${bytes(a.bytes)})`,
  );
  return `${lines.join('\n')}\n`;
}

export const COMMANDS: Record<string, CommandSpec> = {
  serve: {
    usage: 'stowage serve',
    summary: 'run the server (configured by SVC_* variables)',
    details: 'Runs the Git LFS server in this process; it is configured only by SVC_* environment\nvariables (see the README), and stops cleanly on SIGTERM or SIGINT.',
    options: {},
  },
  audit: {
    usage: 'stowage audit [org/repo] [--quarantine]',
    summary: 'read every object back and check it (read-only unless --quarantine)',
    details:
      'Reads every object of the repository back as a download would and checks its sha256 and size.\nRead-only by default, like restic\'s check. Exit 1 when something is corrupt, unreadable or not covered.',
    options: { quarantine: { type: 'boolean', help: 'quarantine what is found, so the next push uploads good bytes (admin)' }, ...REMOTE_OPTIONS },
    run: jobCommand(
      'audit',
      (v) => ({ quarantine: v.quarantine === true }),
      (r) => {
        const q = r.quarantine === 'applied' ? `; ${r.quarantined} quarantined` : r.quarantine === 'not_requested' ? '; nothing quarantined (--quarantine, needs admin)' : '';
        return `${r.objects} objects (${bytes(r.bytes)}) read back: ${r.ok} ok, ${r.corrupt} corrupt, ${r.unreadable} unreadable${r.complete ? '' : ', INCOMPLETE'}${q}`;
      },
    ),
  },
  dedupe: {
    usage: 'stowage dedupe [org/repo]',
    summary: 'fold the legacy per-repository folder into the shared store (admin)',
    details: 'Hashes every file of DATA/repos/{org}/{repo}/ab/cd/<oid>; matching ones join the shared store,\nothers are renamed <oid>.refused and listed. Exit 1 when files were refused or unreadable.',
    options: { ...REMOTE_OPTIONS },
    run: jobCommand('dedupe', () => ({}), (r) => `${r.folded} folded (${r.moved} moved, ${r.already_shared} already shared, ${bytes(r.bytes_freed)} freed), ${r.refused} refused, ${r.unreadable} unreadable`),
  },
  compress: {
    usage: 'stowage compress [org/repo] [--dry-run]',
    summary: 're-encode plain objects in the compressed form (admin)',
    details: 'Re-encodes the repository\'s plain objects into framed zstd, verified before they replace the\noriginals. A dry run measures the real saving and writes nothing. Exit 1 when objects were refused.',
    options: { 'dry-run': { type: 'boolean', short: 'n', help: 'measure only; change nothing' }, ...REMOTE_OPTIONS },
    run: jobCommand(
      'compress',
      (v) => ({ dry_run: v['dry-run'] === true }),
      (r) => `${r.compressed} ${r.dry_run ? 'would be ' : ''}compressed, saving ${bytes(r.saved)} (${bytes(r.bytes_before)} → ${bytes(r.bytes_after)}); ${r.refused} refused`,
    ),
  },
  import: {
    usage: 'stowage import [org/repo] --layout LAYOUT [--source DIR] [--dry-run]',
    summary: "copy another LFS server's content folder into the repository (admin)",
    details:
      'Reads a content folder inside the server\'s SVC_IMPORT_DIR (never written), hashes every file, and\nrecords those whose sha256 matches their name for the repository. Layouts: gitea, forgejo, gitlab,\nlfs-test-server (ab/cd/<oid[4:]>) and git-lfs (a clone\'s .git/lfs/objects, ab/cd/<oid>). Files not\ntaken are listed with the reason. Exit 1 when anything was refused (docs/migration.md).',
    options: {
      layout: { type: 'string', arg: 'LAYOUT', help: 'gitea | forgejo | gitlab | lfs-test-server | git-lfs' },
      source: { type: 'string', arg: 'DIR', help: 'the folder, relative to SVC_IMPORT_DIR (default: SVC_IMPORT_DIR itself)' },
      'dry-run': { type: 'boolean', short: 'n', help: 'hash and report only; record nothing' },
      ...REMOTE_OPTIONS,
    },
    run: async (ctx) => {
      if (typeof ctx.values.layout !== 'string') throw new CliError('import: --layout is required (stowage import --help)', EXIT.usage);
      return jobCommand(
        'import',
        (v) => ({ layout: v.layout, source: v.source ?? '', dry_run: v['dry-run'] === true }),
        (r) => `${r.imported} ${r.dry_run ? 'would be ' : ''}imported (${r.copied} copied, ${r.already_stored} already stored, ${bytes(r.bytes)}), ${r.refused} refused`,
      )(ctx);
    },
  },
  rewrap: {
    usage: 'stowage rewrap [--sweep] --server URL',
    summary: "wrap every object's data key under the key file's first key (server admin)",
    details:
      'After a new key was put first in SVC_ENCRYPTION_KEY_FILE and every node restarted: rewraps each\n' +
      'data key still under an older key, in the index only (no object byte is written). Safe to stop and\n' +
      'run again. When it ends clean, the keys it lists as retirable can leave the key file\n' +
      '(docs/encryption.md, "Rotating and retiring keys"). Exit 1 when data keys could not be unwrapped.\n' +
      '--sweep first deletes the data key rows no stored copy names (it reads every copy\'s header).',
    options: { sweep: { type: 'boolean', help: 'first delete data key rows no stored copy names (reads every stored copy\'s header)' }, ...REMOTE_OPTIONS },
    serverWide: true,
    run: jobCommand(
      'rewrap',
      (v) => ({ sweep: v.sweep === true }),
      (r) =>
        `${r.unused_data_keys ? `${r.unused_data_keys} unused data keys deleted; ` : ''}` +
        `${r.rewrapped} data keys rewrapped under ${r.current_key} (${r.changed_meanwhile} changed meanwhile, ${r.unwrappable} unwrappable), ${r.object_bytes_written} object bytes written; ` +
        `keys in use: ${(r.keys_in_use ?? []).join(', ') || 'none'}; retirable: ${(r.retirable_keys ?? []).join(', ') || 'none'}`,
    ),
  },
  rekey: {
    usage: 'stowage rekey [org/repo]',
    summary: "re-encrypt the repository's objects under fresh data keys (admin)",
    details:
      'After a suspected leak of data keys: writes every encrypted object of the repository again under a\n' +
      'new data key, verified before it replaces the old copy, then deletes the old data key. Exit 1 when\n' +
      'objects were refused (they did not hash to their oid: run an audit).',
    options: { ...REMOTE_OPTIONS },
    run: jobCommand('rekey', () => ({}), (r) => `${r.rekeyed} under a fresh data key, ${r.encrypted} encrypted from the clear (${bytes(r.bytes_written)} written), ${r.skipped} skipped, ${r.refused} refused`),
  },
  encrypt: {
    usage: 'stowage encrypt [org/repo]',
    summary: "encrypt the repository's objects stored in the clear (admin)",
    details:
      'With encryption on: writes every object of the repository still stored in the clear again,\n' +
      'encrypted, verified before it replaces the plain copy. Objects already encrypted are left as they\n' +
      'are. Exit 1 when objects were refused (they did not hash to their oid: run an audit).',
    options: { ...REMOTE_OPTIONS },
    run: jobCommand('encrypt', () => ({}), (r) => `${r.encrypted} encrypted (${bytes(r.bytes_written)} written), ${r.already_encrypted} already encrypted, ${r.skipped} skipped, ${r.refused} refused`),
  },
  retain: {
    usage: 'stowage retain [org/repo] [--dry-run | --yes]',
    summary: 'from a full clone: keep what its history references, drop the rest (push)',
    details:
      "Run inside a full (not shallow) clone: keeps every object 'git lfs ls-files --all --long' lists and\ndrops the repository's other references. Always runs a dry run first; --yes applies it.",
    options: {
      'dry-run': { type: 'boolean', short: 'n', help: 'only the dry run (the default without --yes)' },
      yes: { type: 'boolean', short: 'y', help: 'apply after the dry run' },
      ...REMOTE_OPTIONS,
    },
    run: async ({ client, values, io, cwd }) => {
      if (values.yes === true && values['dry-run'] === true) throw new CliError('retain: --yes and --dry-run contradict each other', EXIT.usage);
      const oids = await referencedOids(cwd);
      io.err.write(`${oids.length} objects referenced by this clone's history\n`);
      const dry = await startAndFollow(client, 'retain', { oids, dry_run: true }, io);
      const summary = (r: Record<string, any>): string =>
        `${r.dry_run ? 'would drop' : 'dropped'} ${r.swept} references, ${r.dry_run ? 'freeing' : 'freed'} ${bytes(r.bytes)}; ${r.kept} kept, ${r.within_grace} within the grace, ${r.in_flight} in flight`;
      if (values.yes !== true) {
        const code = finish(dry, io, summary);
        if (code === EXIT.ok && values['dry-run'] !== true) io.err.write('nothing removed: run again with --yes to apply\n');
        return code;
      }
      if (dry === null || dry.state !== 'done') return finish(dry, io, summary);
      return finish(await startAndFollow(client, 'retain', { oids }, io), io, summary);
    },
  },
  stats: {
    usage: 'stowage stats [org/repo]',
    summary: "the repository's figures: objects, sizes, saving, locks, last audit",
    details: 'A short summary for people; --json prints everything the server knows (largest objects, size histogram, locks).',
    options: { ...REMOTE_OPTIONS },
    run: async ({ client, io }) => {
      const s = (await client.call('GET', 'objects/stats')).json;
      io.out.write(io.json ? `${JSON.stringify(s)}\n` : statsSummary(s));
      return EXIT.ok;
    },
  },
  migrate: {
    usage: 'stowage migrate --to postgres://… [--objects] [--dry-run]',
    summary: 'move a stopped single node (SQLite + disk) to PostgreSQL (+ S3 with --objects)',
    details:
      'Works on the files of SVC_DATA_DIR, as `stowage serve` does, not through a server: stop the server\n' +
      'first (a running one is refused). Replays the journal, copies every table of index.sqlite into the\n' +
      'PostgreSQL database (migrated first), with --objects copies every object into the bucket that\n' +
      'SVC_STORE=s3 and SVC_S3_* name (verified on the way, compressed as SVC_COMPRESSION says), then\n' +
      'verifies: row counts and content digests equal, every object in the bucket. Safe to run again:\n' +
      'only what is missing is added. Exit 0 only when verified; 1 when something differs.',
    options: {
      to: { type: 'string', arg: 'URL', help: 'the PostgreSQL index (default: SVC_DATABASE_URL); the password is never printed' },
      objects: { type: 'boolean', help: 'also copy the objects into the bucket (SVC_STORE=s3, SVC_S3_*)' },
      'dry-run': { type: 'boolean', short: 'n', help: 'count what would be copied; write nothing' },
      json: REMOTE_OPTIONS.json!,
      quiet: REMOTE_OPTIONS.quiet!,
    },
    local: runMigrate,
  },
  cache: {
    usage: 'stowage cache warm [org/repo] [--ref REF] [--server URL]',
    summary: 'a cache node (docs/cache.md): fetch the LFS objects of a ref into it ahead of clones',
    details:
      "Run inside a clone of the repository (its history need not have the objects): reads the LFS pointers\nin the tree of REF (default HEAD) with git, asks the cache for them (batch) and downloads each once,\nso the cache fetches what it lacks from the upstream. The token must be one the upstream accepts.",
    options: {
      ref: { type: 'string', arg: 'REF', help: 'the ref, branch, tag or commit whose files to warm (default HEAD)' },
      ...REMOTE_OPTIONS,
    },
    run: async ({ client, values, rest, io, cwd }) => {
      const [sub, extra] = rest;
      if (sub !== 'warm') throw new CliError(`cache: unknown sub-command ${sub ?? '(none)'} (warm)`, EXIT.usage);
      if (extra !== undefined) throw new CliError(`cache: unexpected argument ${extra}`, EXIT.usage);
      return warmCache(client, cwd, (values.ref as string | undefined) ?? 'HEAD', io);
    },
  },
  jobs: {
    usage: 'stowage jobs [org/repo | --server-wide]\n       stowage jobs follow [org/repo | --server-wide] ID\n       stowage jobs cancel [org/repo | --server-wide] ID',
    summary: "list the repository's jobs; follow one; cancel one",
    details:
      'Jobs run inside the server: Ctrl-C on a command stops watching, not the job. `follow` shows a job\'s\nprogress to its end (exit status as for the command that started it); `cancel` stops it after the\nobject in hand (push; admin for dedupe, compress and a quarantining audit) and waits for `cancelled`.\n--server-wide: the jobs of the whole server (rewrap; a server administrator).',
    options: { 'server-wide': { type: 'boolean', help: 'the server-wide jobs (rewrap) instead of a repository\'s' }, ...REMOTE_OPTIONS },
    run: async ({ client, rest, io }) => {
      const [sub, id, extra] = rest;
      if (extra !== undefined) throw new CliError(`jobs: unexpected argument ${extra}`, EXIT.usage);
      if (sub === undefined || sub === 'list') return listJobs(client, io);
      if (sub === 'follow') {
        const j = (await client.call('GET', `objects/jobs/${jobId(id)}`)).json as JobJson;
        return finish(await follow(client, j, io), io, (r) => Object.entries(r).filter(([, v]) => typeof v !== 'object').map(([k, v]) => `${k} ${v}`).join(', '));
      }
      if (sub === 'cancel') return cancelJob(client, jobId(id), io);
      throw new CliError(`jobs: unknown sub-command ${sub} (list, follow, cancel)`, EXIT.usage);
    },
  },
};

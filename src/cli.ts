#!/usr/bin/env node
/**
 * The operator CLI (issue 6): `stowage serve` runs the server; the maintenance commands talk to a
 * running server over HTTP with a forge token, so every job runs inside the server process — on its
 * worker pool, beside the uploads it must not disturb, with the same in-process guards against
 * in-flight uploads. Safe while serving by construction: nothing here touches the data directory.
 *
 *   stowage audit    org/repo [--no-quarantine]
 *   stowage dedupe   org/repo
 *   stowage compress org/repo [--dry-run]
 *   stowage retain   [org/repo] [--dry-run] [--yes]     (run inside a full git clone)
 *   stowage stats    org/repo
 *   stowage job      org/repo <id>
 *   --server URL (or STOWAGE_URL), --token TOKEN (or STOWAGE_TOKEN), --json
 *
 * Like main.ts this is a process entry, so it alone (with main.ts) reads process.env and exits.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const exec = promisify(execFile);

const USAGE = `usage: stowage <command> [org/repo] [options]
commands:
  serve                     run the server (configured by SVC_* variables)
  audit    org/repo         read every object back and check it; exit 1 when anything is wrong
                            (--no-quarantine: only report, even with admin)
  dedupe   org/repo         fold the legacy per-repository folder into the shared store (admin)
  compress org/repo         re-encode plain objects in the compressed form (admin; --dry-run)
  retain   [org/repo]       from a full git clone: keep what 'git lfs ls-files --all --long' lists,
                            drop the rest (push). Always runs a dry run first; --yes applies it
  stats    org/repo         the repository's figures
  job      org/repo ID      a job's progress and report
options:
  --server URL              server base URL (default: STOWAGE_URL, or the clone's LFS endpoint)
  --token TOKEN             forge token (default: STOWAGE_TOKEN)
  --json                    print the report as JSON only
`;

/** Exit codes: 0 fine, 1 an audit found problems, 2 usage, 3 the server refused or failed. */
class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

interface Args {
  readonly command: string;
  readonly positional: string[];
  readonly flags: Map<string, string | true>;
}

function parseArgs(argv: string[]): Args {
  const [command = 'help', ...rest] = argv;
  const positional: string[] = [];
  const flags = new Map<string, string | true>();
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i]!;
    if (a.startsWith('--')) {
      const [k, v] = a.slice(2).split('=', 2) as [string, string | undefined];
      if (v !== undefined) flags.set(k, v);
      else if ((k === 'server' || k === 'token') && i + 1 < rest.length) flags.set(k, rest[++i]!);
      else flags.set(k, true);
    } else positional.push(a);
  }
  return { command, positional, flags };
}

interface Client {
  readonly base: string;
  readonly token: string | null;
}

async function call(client: Client, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (client.token !== null) headers.authorization = `Basic ${Buffer.from(`stowage:${client.token}`).toString('base64')}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(`${client.base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new CliError(`cannot reach ${client.base}: ${(e as Error).message}`, 3);
  }
  const text = await res.text();
  let json: any = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    json = { message: text };
  }
  if (res.status >= 400) throw new CliError(`${method} ${path}: ${res.status} ${json?.message ?? ''}`.trim(), 3);
  return { status: res.status, json };
}

const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
function human(n: number | null): string {
  if (n === null) return '?';
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return `${u === 0 ? n : n.toFixed(1)} ${units[u]}`;
}

/** Draws progress: a bar redrawn in place on a terminal, a plain line every few seconds otherwise. */
class ProgressView {
  readonly #tty = process.stderr.isTTY === true;
  #lastLine = 0;

  show(kind: string, j: any): void {
    const total = j.bytes_total ?? 0;
    const frac = total > 0 ? Math.min(1, j.bytes_done / total) : j.objects_total ? j.objects_done / j.objects_total : 0;
    const text = `${kind} ${j.state} ${j.objects_done}/${j.objects_total ?? '?'} objects, ${human(j.bytes_done)}/${human(j.bytes_total)}`;
    if (this.#tty) {
      const width = 30;
      const fill = Math.round(frac * width);
      process.stderr.write(`\r[${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${(frac * 100).toFixed(0).padStart(3)}% ${text}\x1b[K`);
    } else if (Date.now() - this.#lastLine > 5000 || j.state !== 'running') {
      this.#lastLine = Date.now();
      process.stderr.write(`${text}\n`);
    }
  }

  end(): void {
    if (this.#tty) process.stderr.write('\n');
  }
}

/** Starts a job without waiting, follows its progress, and returns its final report. */
async function runJob(client: Client, repo: string, kind: string, body: object): Promise<any> {
  const started = await call(client, 'POST', `/${repo}/objects/${kind}`, { ...body, wait: false });
  const href: string = started.json.href;
  const view = new ProgressView();
  let j = started.json;
  try {
    while (j.state === 'queued' || j.state === 'running') {
      view.show(kind, j);
      await new Promise((r) => setTimeout(r, 500));
      j = (await call(client, 'GET', href)).json;
    }
    view.show(kind, j);
  } finally {
    view.end();
  }
  if (j.state !== 'done') throw new CliError(`${kind} ${j.state}: ${j.error ?? 'no report'} (run it again to finish)`, 3);
  return j.report;
}

function print(report: unknown, json: boolean, summary: string): void {
  if (!json) process.stderr.write(`${summary}\n`);
  process.stdout.write(`${JSON.stringify(report, null, json ? 0 : 2)}\n`);
}

function needRepo(a: Args): string {
  const repo = a.positional[0];
  if (repo === undefined || !/^[A-Za-z0-9_][A-Za-z0-9._-]*\/[A-Za-z0-9_][A-Za-z0-9._-]*$/.test(repo)) throw new CliError(`${a.command} needs org/repo\n${USAGE}`, 2);
  return repo;
}

/** The clone's LFS endpoint (`git lfs env`), split into server base URL and org/repo. */
async function lfsEndpoint(): Promise<{ base: string; repo: string } | null> {
  const { stdout } = await exec('git', ['lfs', 'env'], { maxBuffer: 16 << 20 }).catch(() => ({ stdout: '' }));
  const m = /^Endpoint=(\S+)/m.exec(stdout);
  if (!m) return null;
  const u = new URL(m[1]!);
  const parts = u.pathname.replace(/\/+$/, '').split('/').filter(Boolean);
  if (parts.length < 2) return null;
  const repo = parts.slice(-2).join('/').replace(/\.git$/, '');
  u.pathname = parts.slice(0, -2).join('/');
  return { base: `${u.origin}${u.pathname === '/' ? '' : u.pathname}`, repo };
}

/** Every oid the clone's history references, from all refs: refuses a shallow clone (it would miss some). */
async function referencedOids(): Promise<string[]> {
  const shallow = await exec('git', ['rev-parse', '--is-shallow-repository']).catch((e: Error) => {
    throw new CliError(`retain must run inside a git clone: ${e.message}`, 2);
  });
  if (shallow.stdout.trim() === 'true') throw new CliError('refusing a shallow clone: it does not see every commit, so retain would drop objects still in use (git fetch --unshallow)', 2);
  const { stdout } = await exec('git', ['lfs', 'ls-files', '--all', '--long'], { maxBuffer: 1 << 30 });
  const oids = new Set<string>();
  for (const line of stdout.split('\n')) {
    const m = /^([0-9a-f]{64}) /.exec(line);
    if (m) oids.add(m[1]!);
  }
  return [...oids];
}

async function main(argv: string[]): Promise<number> {
  const a = parseArgs(argv);
  if (a.command === 'serve') {
    await import('./main.js');
    return -1; // the server keeps the process alive and exits on its own
  }
  if (a.command === 'help' || a.flags.has('help')) {
    process.stdout.write(USAGE);
    return 0;
  }
  const json = a.flags.has('json');
  const token = (a.flags.get('token') as string | undefined) ?? process.env.STOWAGE_TOKEN ?? null;
  let base = (a.flags.get('server') as string | undefined) ?? process.env.STOWAGE_URL ?? null;
  let repo: string;
  if (a.command === 'retain' && a.positional[0] === undefined) {
    const ep = await lfsEndpoint();
    if (ep === null) throw new CliError('retain: name org/repo, or run it inside a clone whose LFS endpoint is this server', 2);
    repo = ep.repo;
    base ??= ep.base;
  } else if (['audit', 'dedupe', 'compress', 'retain', 'stats', 'job'].includes(a.command)) {
    repo = needRepo(a);
  } else {
    throw new CliError(`unknown command ${a.command}\n${USAGE}`, 2);
  }
  if (base === null) throw new CliError('give --server URL (or set STOWAGE_URL)', 2);
  const client: Client = { base: base.replace(/\/+$/, ''), token };

  switch (a.command) {
    case 'stats': {
      print((await call(client, 'GET', `/${repo}/objects/stats`)).json, json, `${repo}: figures`);
      return 0;
    }
    case 'job': {
      const id = a.positional[1];
      if (id === undefined) throw new CliError('job needs org/repo and a job id', 2);
      print((await call(client, 'GET', `/${repo}/objects/jobs/${encodeURIComponent(id)}`)).json, json, `${repo}: job ${id}`);
      return 0;
    }
    case 'audit': {
      const r = await runJob(client, repo, 'audit', { quarantine: !a.flags.has('no-quarantine') });
      const bad = r.corrupt + r.unreadable;
      print(r, json, `${repo}: ${r.objects} objects (${human(r.bytes)}) read back; ${r.corrupt} do not match, ${r.unreadable} unreadable; ${r.complete ? 'complete' : 'INCOMPLETE'}; quarantine ${r.quarantine}`);
      return bad > 0 || !r.complete ? 1 : 0;
    }
    case 'dedupe': {
      const r = await runJob(client, repo, 'dedupe', {});
      print(r, json, `${repo}: ${r.folded} folded (${r.moved} moved, ${r.already_shared} already shared, ${human(r.bytes_freed)} freed), ${r.refused} refused, ${r.unreadable} unreadable`);
      return r.refused + r.unreadable > 0 ? 1 : 0;
    }
    case 'compress': {
      const dry = a.flags.has('dry-run');
      const r = await runJob(client, repo, 'compress', { dry_run: dry });
      print(r, json, `${repo}: ${r.compressed} ${dry ? 'would be ' : ''}compressed, saving ${human(r.saved)} (${human(r.bytes_before)} → ${human(r.bytes_after)}); ${r.refused} refused`);
      return r.refused > 0 ? 1 : 0;
    }
    case 'retain': {
      const oids = await referencedOids();
      process.stderr.write(`${oids.length} objects referenced by this clone's history\n`);
      const dry = await runJob(client, repo, 'retain', { oids, dry_run: true });
      print(dry, json, `dry run: ${dry.swept} references would go, freeing ${human(dry.bytes)}; ${dry.within_grace} within the grace, ${dry.in_flight} in flight`);
      if (a.flags.has('dry-run')) return 0;
      if (!a.flags.has('yes')) {
        process.stderr.write('nothing removed: run again with --yes to apply\n');
        return 0;
      }
      const r = await runJob(client, repo, 'retain', { oids });
      print(r, json, `${repo}: ${r.swept} references dropped, ${human(r.bytes)} freed; ${r.within_grace} within the grace`);
      return 0;
    }
  }
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`stowage: ${(e as Error).message}\n`);
    process.exitCode = e instanceof CliError ? e.exitCode : 3;
  },
);

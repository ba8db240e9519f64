import { CliError, EXIT, SERVER_WIDE, type Client } from './client.js';
import { bytes, duration, Paint, table } from './output.js';
import { ProgressView, type JobProgressView } from './progress.js';

/** A job as the server shows it (GET /{org}/{repo}/objects/jobs/{id}). */
export interface JobJson extends JobProgressView {
  readonly outcome: string | null;
  readonly dry_run: boolean;
  readonly finished_at: string | null;
  readonly report: Record<string, any> | null;
  readonly error: string | null;
}

/** How often a followed job is asked for its figures. */
const POLL_MS = 500;

/** What the commands share: the output streams, --json and --quiet, colours. */
export interface Io {
  readonly json: boolean;
  readonly quiet: boolean;
  readonly out: NodeJS.WriteStream;
  readonly err: NodeJS.WriteStream;
  readonly paint: Paint;
}

const running = (j: JobJson): boolean => j.state === 'queued' || j.state === 'running';
/** How a command line names the client's target: its repository, or --server-wide. */
const targetArg = (c: Client): string => (c.target.repo === SERVER_WIDE ? '--server-wide' : c.target.repo);
/** The client's target for people: its repository, or the whole server. */
const targetName = (c: Client): string => (c.target.repo === SERVER_WIDE ? 'the whole server' : c.target.repo);
const followHint = (c: Client, id: string): string => `stowage jobs follow ${targetArg(c)} ${id}`;

/** Null when the user pressed Ctrl-C, which stops only the following: the job runs on in the server. */
export async function follow(client: Client, first: JobJson, io: Io, announce = ''): Promise<JobJson | null> {
  const view = new ProgressView(io.err);
  let stop!: () => void;
  const interrupted = new Promise<null>((resolve) => (stop = () => resolve(null)));
  const onSigint = (): void => stop();
  process.once('SIGINT', onSigint);
  // Said only once Ctrl-C is ours: from this line on, it stops the watching and never the job.
  io.err.write(announce);
  let j = first;
  try {
    for (;;) {
      if (!io.quiet) view.show(j);
      if (!running(j)) return j;
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<'tick'>((r) => (timer = setTimeout(() => r('tick'), POLL_MS)));
      if ((await Promise.race([tick, interrupted])) === null) {
        clearTimeout(timer);
        view.end();
        io.err.write(`\nstopped following; job ${j.id} keeps running on the server.\n  follow it:  ${followHint(client, j.id)}\n  cancel it:  stowage jobs cancel ${targetArg(client)} ${j.id}\n`);
        return null;
      }
      j = (await client.call('GET', `objects/jobs/${encodeURIComponent(j.id)}`)).json as JobJson;
    }
  } finally {
    process.off('SIGINT', onSigint);
    view.end();
  }
}

/** Starts a job without waiting (the server answers 202), says its id, and follows it. */
export async function startAndFollow(client: Client, kind: string, body: object, io: Io): Promise<JobJson | null> {
  const started = (await client.call('POST', `objects/${kind}`, { ...body, wait: false })).json as JobJson;
  return follow(client, started, io, `${kind} job ${started.id} started on ${targetName(client)} (Ctrl-C stops watching, not the job)\n`);
}

/**
 * The exit status and message of a finished job: 0 clean, 1 problems found, 3 failed, cancelled or
 * interrupted (the work is not finished; running it again finishes it).
 */
export function finalStatus(j: JobJson, io: Io): number {
  if (j.state === 'done') return j.outcome === 'problems' ? EXIT.problems : EXIT.ok;
  const why = j.state === 'failed' ? `failed: ${j.error ?? 'see the server log'}` : j.state === 'cancelled' ? 'was cancelled' : 'was interrupted by a server stop';
  io.err.write(`${io.paint.red(`${j.kind} job ${j.id} ${why}`)} after ${j.objects_done}/${j.objects_total ?? '?'} objects; run it again to finish\n`);
  return EXIT.failed;
}

export async function listJobs(client: Client, io: Io): Promise<number> {
  const { jobs } = (await client.call('GET', 'objects/jobs')).json as { jobs: JobJson[] };
  if (io.json) {
    io.out.write(`${JSON.stringify({ jobs })}\n`);
    return EXIT.ok;
  }
  if (jobs.length === 0) {
    io.out.write(`no jobs on ${targetName(client)}\n`);
    return EXIT.ok;
  }
  const rows = jobs.map((j) => {
    const pct = j.bytes_total ? `${Math.floor((100 * j.bytes_done) / j.bytes_total)}%` : running(j) ? '…' : '';
    const took = ((j.finished_at === null ? Date.now() : Date.parse(j.finished_at)) - Date.parse(j.started_at)) / 1000;
    const outcome = j.outcome ?? '';
    const shown = outcome === 'clean' ? io.paint.green(outcome) : outcome === '' ? '' : io.paint.red(outcome);
    return [j.id, `${j.kind}${j.dry_run && j.kind !== 'audit' ? ' (dry run)' : ''}`, j.state, shown, pct, `${bytes(j.bytes_done)}/${bytes(j.bytes_total)}`, j.started_at.replace('T', ' ').slice(0, 19), duration(took)];
  });
  io.out.write(table(['ID', 'KIND', 'STATE', 'OUTCOME', 'DONE', 'BYTES', 'STARTED (UTC)', 'TOOK'], rows, new Set([4])));
  return EXIT.ok;
}

/** `stowage jobs cancel ID`: asks the server to stop the job, then waits for its final state. */
export async function cancelJob(client: Client, id: string, io: Io): Promise<number> {
  const first = (await client.call('POST', `objects/jobs/${encodeURIComponent(id)}/cancel`)).json as JobJson;
  if (!running(first) && first.state !== 'cancelled') {
    if (io.json) io.out.write(`${JSON.stringify(first)}\n`);
    else io.out.write(`job ${id} had already finished: ${first.state}${first.outcome ? ` (${first.outcome})` : ''}\n`);
    return EXIT.ok;
  }
  if (running(first)) io.err.write(`cancelling ${first.kind} job ${id}: it stops after the object in hand\n`);
  const last = await follow(client, first, { ...io, quiet: true });
  if (last === null) return EXIT.interrupted;
  if (io.json) io.out.write(`${JSON.stringify(last)}\n`);
  else io.out.write(`${last.kind} job ${id} ${last.state} after ${last.objects_done}/${last.objects_total ?? '?'} objects\n`);
  return last.state === 'cancelled' ? EXIT.ok : EXIT.failed;
}

export function jobId(v: string | undefined): string {
  if (v === undefined || !/^[A-Za-z0-9_-]{1,64}$/.test(v)) throw new CliError(`not a job id: ${v ?? '(none)'} (stowage jobs lists them)`, EXIT.usage);
  return v;
}

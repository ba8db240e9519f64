/** How a job ended, for people: the job view's `outcome` (the dashboard and the CLI show it). */
export type JobOutcome = 'clean' | 'problems' | 'failed' | 'cancelled' | 'interrupted';

/** Every state a job passes through; the last four are final. */
export type JobState = 'queued' | 'running' | 'done' | 'failed' | 'cancelled' | 'interrupted';

const n = (v: unknown): number => (typeof v === 'number' ? v : 0);

/**
 * The outcome of a job from its state and final report, null while it is queued or running. A job
 * that ran to the end is `problems` when its report names something an operator must look at: an
 * audit that found corrupt or unreadable objects, a dedupe or compress that refused files, or any
 * job that says it did not cover everything (`complete: false`); otherwise `clean`. Derived rather
 * than stored, so rows written before this field existed read the same way.
 */
export function jobOutcome(kind: string, state: string, report: unknown): JobOutcome | null {
  switch (state) {
    case 'failed':
    case 'cancelled':
    case 'interrupted':
      return state;
    case 'done':
      break;
    default:
      return null;
  }
  const r = (report ?? {}) as Record<string, unknown>;
  if (r.complete === false) return 'problems';
  const problems = kind === 'audit' ? n(r.corrupt) + n(r.unreadable) : kind === 'dedupe' ? n(r.refused) + n(r.unreadable) : kind === 'compress' || kind === 'import' ? n(r.refused) : 0;
  return problems > 0 ? 'problems' : 'clean';
}

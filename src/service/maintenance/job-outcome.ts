/** How a job ended, for people: the job view's `outcome` (the dashboard and the CLI show it). */
export type JobOutcome = 'clean' | 'problems' | 'failed' | 'cancelled' | 'interrupted';

/** Every state a job passes through; the last four are final. */
export type JobState = 'queued' | 'running' | 'done' | 'failed' | 'cancelled' | 'interrupted';

/** The report counters that mean something is wrong when above zero, per kind, in the order shown. */
const PROBLEM_COUNTS: Readonly<Record<string, readonly string[]>> = {
  audit: ['corrupt', 'unreadable'],
  dedupe: ['unreadable', 'refused'],
  compress: ['refused'],
  import: ['refused'],
  rewrap: ['unwrappable'],
  rekey: ['refused'],
  encrypt: ['refused'],
};

/** What a finished job's report names for an operator to look at ("1 corrupt", "not complete"). */
export function jobProblems(kind: string, report: unknown): string[] {
  if (typeof report !== 'object' || report === null) return [];
  const r = report as Record<string, unknown>;
  const found = (PROBLEM_COUNTS[kind] ?? []).flatMap((k) => (typeof r[k] === 'number' && r[k] > 0 ? [`${r[k]} ${k}`] : []));
  return r.complete === false ? [...found, 'not complete'] : found;
}

/** Null while queued or running. Derived, not stored, so rows older than the field read the same way. */
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
  return jobProblems(kind, report).length > 0 ? 'problems' : 'clean';
}

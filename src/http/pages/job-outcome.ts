/**
 * How a maintenance job ended, for the dashboard: a job that finished but found damage must never
 * read as plain "done". The job view carries `outcome` once the runner reports it; until then (and
 * for rows written before it did) the outcome is read from the state and the job's report.
 */

/** clean, problems (found damage or left work undone), failed, cancelled, interrupted. */
export type JobOutcome = 'clean' | 'problems' | 'failed' | 'cancelled' | 'interrupted';

/** The fields of a job view the outcome is read from; `outcome` and `report` may be absent. */
export interface OutcomeSource {
  readonly state: string;
  readonly outcome?: string | null;
  readonly report?: unknown;
}

/** Report counters that mean something is wrong when above zero (audit, dedupe, compress reports). */
const PROBLEM_COUNTS = ['corrupt', 'unreadable', 'refused'] as const;

/** The job's outcome, or null while it is queued or running. */
export function jobOutcome(job: OutcomeSource): JobOutcome | null {
  if (job.outcome !== undefined) return job.outcome as JobOutcome | null;
  switch (job.state) {
    case 'queued':
    case 'running':
      return null;
    case 'done':
      return problems(job.report).length > 0 ? 'problems' : 'clean';
    case 'failed':
    case 'cancelled':
    case 'interrupted':
      return job.state;
    default:
      return 'failed';
  }
}

/** What a finished job's report says is wrong ("1 corrupt", "not complete"); empty when nothing is. */
export function problems(report: unknown): string[] {
  if (!isRecord(report)) return [];
  const found = PROBLEM_COUNTS.flatMap((k) => (typeof report[k] === 'number' && report[k] > 0 ? [`${report[k]} ${k}`] : []));
  // complete: false means objects were left unchecked or untouched (the reports' own flag).
  return report.complete === false ? [...found, 'not complete'] : found;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}

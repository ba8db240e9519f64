/**
 * What a finished job found wrong, for the dashboard's outcome badge (the outcome itself is the job
 * view's, from service/maintenance/job-outcome.ts).
 */

/** Report counters that mean something is wrong when above zero (audit, dedupe, compress, import reports). */
const PROBLEM_COUNTS = ['corrupt', 'unreadable', 'refused'] as const;

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

/**
 * The targets table of docs/performance.md and the README's Speed section, generated from a run's
 * results (latest.json) so that the pages show what the bench measured and nothing retyped.
 */
import type { BenchResults, Comparison } from './report.js';

const cell = (s: string): string => s.replace(/\|/g, '\\|');

/** Rows judged against a target (PASS or MISS); probes and rows without a target are left out. */
export const judged = (r: BenchResults): Comparison[] => r.comparisons.filter((c) => c.pass !== null);

/** One line on the run: when, where, how loaded; for the reference page, not the README. */
export function runLine(r: BenchResults): string {
  const m = r.machine;
  return (
    `Run of ${m.startedAt.replace('T', ' ').replace(/\.\d+Z$/, ' UTC')} (${r.mode}${r.only ? `, only ${r.only.join(',')}` : ''}, ${Math.round(r.durationSeconds)} s): ` +
    `${m.cpuModel}, ${m.cores} cores, ${m.memoryGiB} GiB, ${m.kernel}, node ${m.node}, ${m.filesystem}; ` +
    `1/5/15-minute load ${m.loadAtStart.join(' / ')} at the start, ${m.loadAtEnd.join(' / ')} at the end.`
  );
}

/** The judged rows as markdown: target, client, our figure, the yardstick beside it, the ratio, PASS/MISS. */
export function targetsTable(r: BenchResults): string {
  const rows = judged(r).map((c) => [c.target, c.label, c.client ?? '—', c.ours, c.limit, c.ratio, c.pass ? 'PASS' : 'MISS']);
  return [
    '| Target | Row | Client | Ours | Beside it, same run | Ratio | |',
    '|---|---|---|---|---|---|---|',
    ...rows.map((row) => `| ${row.map(cell).join(' | ')} |`),
  ].join('\n');
}

/** The README's table: the targets judged through the clients users have (curl, git-lfs) and the idle RSS. */
export function readmeTable(r: BenchResults): string {
  const users = judged(r).filter((c) => !c.label.startsWith('ceiling:') && (c.client === undefined || /^(curl|git-lfs|—)/.test(c.client)));
  const ours = (c: Comparison): string => (c.ratio === '—' ? c.ours : `${c.ours}; ${c.ratio}`);
  return [
    '| Row | Client | Ours | Beside it, same run | Target | |',
    '|---|---|---|---|---|---|',
    ...users.map((c) => `| ${[c.label, (c.client ?? '—').replace(/ [\d.]+/g, ''), ours(c), c.limit, c.target, c.pass ? 'PASS' : 'MISS'].map(cell).join(' | ')} |`),
  ].join('\n');
}

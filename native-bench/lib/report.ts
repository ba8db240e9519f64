import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { MachineInfo } from './machine-info.js';
import { SERVER_NODE_FLAGS } from './product.js';

/** One measured figure. Rates use MB = 10^6 bytes (as dd and the targets do). */
export interface Measurement {
  /** Stable key, e.g. "limits.sha256" or "server.upload_1g". */
  readonly key: string;
  readonly group: 'limits' | 'server';
  readonly label: string;
  readonly value: number;
  readonly unit: string;
  /** Free-form context: sizes, percentiles, CPU time. */
  readonly detail?: string;
}

/** One of our figures set against a machine limit and, when the issues give one, a target. */
export interface Comparison {
  readonly label: string;
  /** The client that drove the transfers ("curl 7.88.1", "undici (ceiling probe)"); absent for a limit. */
  readonly client?: string;
  readonly ours: string;
  readonly limit: string;
  /** How ours compares, e.g. "93% of dd" or "44% of budget"; the number is in ratioValue. */
  readonly ratio: string;
  /** ours / limit for rates, limit / ours for costs (> 1 is better than the limit); budget use for RSS. */
  readonly ratioValue: number | null;
  readonly target: string;
  readonly pass: boolean | null;
}

/** Everything one run produced: what latest.json holds. */
export interface BenchResults {
  readonly machine: MachineInfo;
  readonly mode: 'full' | 'quick';
  readonly only: readonly string[] | null;
  readonly measurements: Measurement[];
  readonly comparisons: Comparison[];
  readonly notes: string[];
  durationSeconds: number;
}

/** Formats a number with sensible precision for a table cell. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  const a = Math.abs(n);
  if (a >= 1000) return Math.round(n).toLocaleString('en-US');
  if (a >= 100) return n.toFixed(0);
  if (a >= 10) return n.toFixed(1);
  if (a >= 1) return n.toFixed(2);
  return n.toFixed(3);
}

function table(head: string[], rows: string[][]): string {
  const esc = (s: string): string => s.replace(/\|/g, '\\|');
  return [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.map(esc).join(' | ')} |`)].join('\n');
}

/** The whole report as markdown: machine, raw limits, our server, ratios with PASS/MISS. */
export function renderMarkdown(r: BenchResults): string {
  const m = r.machine;
  const lines: string[] = [];
  lines.push(`## Stowage native-bench (${r.mode}${r.only ? `, only ${r.only.join(',')}` : ''}) — ${m.startedAt}`);
  lines.push('');
  lines.push(
    `Machine: ${m.cpuModel}, ${m.cores} cores, ${m.memoryGiB} GiB RAM, ${m.kernel}, node ${m.node}; ` +
      `data dir ${m.dataDir} on ${m.filesystem}, ${m.diskFreeGiB} GiB free; load average at start ${m.loadAtStart.join(' / ')}, ` +
      `at end ${m.loadAtEnd.join(' / ')}; run took ${Math.round(r.durationSeconds)} s. ` +
      `Servers started as npm run start:prod starts them: node ${SERVER_NODE_FLAGS.join(' ')} dist/src/main.js.`,
  );
  lines.push('');
  for (const group of ['limits', 'server'] as const) {
    const rows = r.measurements.filter((x) => x.group === group);
    if (rows.length === 0) continue;
    lines.push(group === 'limits' ? '### Raw limits of this machine' : '### Our server (real process, real HTTP, loopback)');
    lines.push('');
    lines.push(table(['Measure', 'Value', 'Unit', 'Detail'], rows.map((x) => [x.label, fmt(x.value), x.unit, x.detail ?? ''])));
    lines.push('');
  }
  if (r.comparisons.length > 0) {
    lines.push('### Our figures against the limits and the targets');
    lines.push('');
    lines.push(
      table(
        ['Figure', 'Client', 'Ours', 'Limit', 'Ratio', 'Target', 'Result'],
        r.comparisons.map((c) => [c.label, c.client ?? '—', c.ours, c.limit, c.ratio, c.target, c.pass === null ? '—' : c.pass ? 'PASS' : 'MISS']),
      ),
    );
    lines.push('');
  }
  if (r.notes.length > 0) {
    lines.push('Notes:');
    for (const n of r.notes) lines.push(`- ${n}`);
    lines.push('');
  }
  return lines.join('\n');
}

/** Writes latest.json and latest.md next to each other. */
export function writeResults(r: BenchResults, jsonPath: string, mdPath: string): void {
  mkdirSync(dirname(jsonPath), { recursive: true });
  writeFileSync(jsonPath, `${JSON.stringify(r, null, 2)}\n`);
  writeFileSync(mdPath, `${renderMarkdown(r)}\n`);
}

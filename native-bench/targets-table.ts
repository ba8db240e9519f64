/**
 * Prints the targets table of a run (default: results/latest.json) as markdown, for
 * docs/performance.md and the README's Speed section:
 *
 *   node native-bench/dist/targets-table.js [RESULTS.json] [--no-run-line] [--readme]
 *
 * --readme: the README's shorter table (the targets through curl and git-lfs), without the run line.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchResults } from './lib/report.js';
import { readmeTable, runLine, targetsTable } from './lib/targets.js';

const args = process.argv.slice(2);
const file = args.find((a) => !a.startsWith('--')) ?? resolve(dirname(fileURLToPath(import.meta.url)), '../results/latest.json');
const results = JSON.parse(readFileSync(file, 'utf8')) as BenchResults;
const readme = args.includes('--readme');
if (!readme && !args.includes('--no-run-line')) process.stdout.write(`${runLine(results)}\n\n`);
process.stdout.write(`${readme ? readmeTable(results) : targetsTable(results)}\n`);

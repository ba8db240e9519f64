/**
 * Prints where a V8 CPU profile spent its time: self time per function, top first.
 *   node native-bench/dist/profile-summary.js <file.cpuprofile> [top=25]
 * `npm run bench -- --profile` writes the server's profiles to native-bench/results/profiles/.
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** Self milliseconds per "function (file:line)", sorted, with the profile's total. */
export function summarize(profile: CpuProfile): { total: number; rows: { name: string; ms: number }[] } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = (profile.timeDeltas[i] ?? 0) / 1000;
    total += dt;
    const f = byId.get(id)!.callFrame;
    const file = f.url.replace(/^.*\/(node_modules|dist)\//, '$1/').replace(/^node:/, '');
    const name = `${f.functionName || '(anonymous)'}${file ? ` (${file}:${f.lineNumber + 1})` : ''}`;
    self.set(name, (self.get(name) ?? 0) + dt);
  });
  const rows = [...self].map(([name, ms]) => ({ name, ms })).sort((a, b) => b.ms - a.ms);
  return { total, rows };
}

if (process.argv[1]?.endsWith('profile-summary.js')) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write('usage: node native-bench/dist/profile-summary.js <file.cpuprofile> [top]\n');
    process.exit(2);
  }
  const top = Number(process.argv[3] ?? 25);
  const { total, rows } = summarize(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile);
  process.stdout.write(`${file}: ${total.toFixed(0)} ms sampled\n`);
  for (const r of rows.slice(0, top)) process.stdout.write(`${r.ms.toFixed(0).padStart(8)} ms ${((r.ms / total) * 100).toFixed(1).padStart(5)}%  ${r.name}\n`);
}

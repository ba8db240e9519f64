import t from 'tap';
import { jobProblems } from '../../../../src/service/maintenance/job-outcome.js';
import { byteTicks, countTicks, lineChart, timeTicks } from '../../../../src/http/pages/svg-plots.js';

// The dashboard's axis arithmetic and job outcomes: pure functions, checked value by value.

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;

t.test('byte axes tick at round values of one binary unit', async (t) => {
  const g = byteTicks(3.49 * GiB);
  t.same(g.labels, ['0', '1 GiB', '2 GiB', '3 GiB', '4 GiB'], 'not 1.16 / 2.33 / 3.49 GiB');
  t.same(g.values, [0, GiB, 2 * GiB, 3 * GiB, 4 * GiB]);
  t.equal(g.top, 4 * GiB);
  t.same(byteTicks(71.3 * KiB).labels, ['0', '20 KiB', '40 KiB', '60 KiB', '80 KiB']);
  t.same(byteTicks(1.07 * MiB).labels, ['0', '0.5 MiB', '1 MiB', '1.5 MiB'], 'half steps when the maximum is just over one unit');
  t.same(byteTicks(1 * GiB).labels, ['0', '0.5 GiB', '1 GiB'], 'an exact unit is the top');
  t.same(byteTicks(900 * MiB).labels, ['0', '500 MiB', '1000 MiB'], 'under the next unit: steps of the smaller one');
  t.same(byteTicks(40 * MiB, '/s').labels, ['0', '10 MiB/s', '20 MiB/s', '30 MiB/s', '40 MiB/s'], 'rates carry their unit');
  t.same(byteTicks(3).labels, ['0', '1 B', '2 B', '3 B'], 'bytes are never fractional');
  t.same(byteTicks(0).labels, ['0', '1 B'], 'an empty axis still has a top');
  for (const max of [1, 7, 999, 1500, 5 * MiB + 3, 123.4 * GiB, 2 ** 50 * 3]) {
    const ticks = byteTicks(max);
    t.ok(ticks.top >= max, `${max}: the top covers the maximum`);
    t.ok(ticks.values.length >= 2 && ticks.values.length <= 6, `${max}: ${ticks.values.length} ticks`);
    t.ok(ticks.labels.every((l) => /^(0|\d+(\.\d)? (B|KiB|MiB|GiB|TiB|PiB))$/.test(l)), `${max}: round labels ${ticks.labels.join(' ')}`);
  }
});

t.test('count axes are whole numbers with at least four steps', async (t) => {
  t.same(countTicks(1).labels, ['0', '1', '2', '3', '4']);
  t.same(countTicks(9).labels, ['0', '5', '10']);
  t.same(countTicks(37).labels, ['0', '10', '20', '30', '40']);
});

t.test('time axes tick at round UTC times, more than two of them', async (t) => {
  const end = Date.parse('2026-11-23T20:07:30Z');
  t.same(timeTicks(end - 24 * 3600_000, end).map((x) => x.label), ['00:00', '06:00', '12:00', '18:00']);
  t.same(timeTicks(end - 15 * 60_000, end).map((x) => x.label), ['19:55', '20:00', '20:05']);
  t.same(timeTicks(end - 3600_000, end).map((x) => x.label), ['19:10', '19:20', '19:30', '19:40', '19:50', '20:00']);
});

t.test('line chart: titled axes, a legend, per-series styles and no viewBox scaling of text', async (t) => {
  const end = Date.parse('2026-11-23T20:00:00Z');
  const pts = (k: number): [number, number][] => [0, 1, 2].map((i) => [end - (2 - i) * 3600_000, k * i * GiB]);
  const svg = lineChart('Storage over time', [{ name: 'held', points: pts(1) }, { name: 'stored', points: pts(1) }], (m) => byteTicks(m), 'Bytes');
  t.match(svg, /<ul class="legend">.*held.*stored/);
  t.match(svg, /<svg class="chart axis" width="100%" height="\d+" role="img" aria-label="Storage over time"/, 'outer SVG in CSS pixels');
  t.match(svg, />Time \(UTC\)</);
  t.match(svg, />Bytes</);
  t.match(svg, /class="s0"[^>]*points=/, 'first series');
  t.match(svg, /class="s1"[^>]*points=/, 'second series drawn in its own style, so equal series both show');
  t.match(svg, />2 GiB</);
});

t.test('what a finished job found wrong, for its outcome badge', async (t) => {
  t.same(jobProblems('audit', { corrupt: 1, unreadable: 2, complete: false }), ['1 corrupt', '2 unreadable', 'not complete']);
  t.same(jobProblems('dedupe', { unreadable: 1, refused: 2, complete: true }), ['1 unreadable', '2 refused']);
  t.same(jobProblems('compress', { refused: 0, complete: true }), []);
  t.same(jobProblems('audit', null), []);
});

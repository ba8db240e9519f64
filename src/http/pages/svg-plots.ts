import { esc } from './html.js';

/**
 * Inline SVG plots drawn on the server: no script, no library, no style attributes (the pages'
 * strict CSP allows none); colours and text size come from the stylesheet through classes.
 *
 * No viewBox: one user unit is one CSS pixel, so text keeps the stylesheet's size at any width.
 * Across, positions are percentages; the value axis sits in the left margin (negative x, `svg.chart`
 * in html.ts); the lines go in a nested SVG stretched to the plot area, with non-scaling strokes.
 */

const PLOT_H = 170;
const TOP = 26;
/** The value axis's labels and title sit left of x = 0, in the margin `svg.chart` has in html.ts. */
const AXIS_W = 66;
const X_LABELS_H = 22;
/** Nested viewBox width of the data lines: fine enough for a 24 h series of minute points. */
const DATA_W = 1000;
/** Series styles: the first a wide pale band, the next ones narrower and dashed, so equal series both show. */
const SERIES = ['s0', 's1', 's2', 's3'];

const n = (v: number): string => (Math.round(v * 100) / 100).toString();
const pct = (f: number): string => `${n(f * 100)}%`;

const BINARY_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

export interface Ticks {
  readonly top: number;
  readonly values: readonly number[];
  readonly labels: readonly string[];
}

function roundStep(raw: number, min: number): number {
  if (raw <= min) return min;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5]) if (m * p >= raw - p * 1e-9) return m * p;
  return 10 * p;
}

function ticksOf(step: number, top: number, label: (v: number) => string): Ticks {
  const values: number[] = [];
  for (let i = 0; i * step <= top * (1 + 1e-9); i++) values.push(i * step);
  return { top, values, labels: values.map(label) };
}

/**
 * Ticks for a byte (or byte rate) axis at round values of the largest binary unit that keeps the
 * maximum at or above 1 (3.49 GiB: 0..4 GiB); never fractional bytes. `suffix` follows the unit.
 */
export function byteTicks(max: number, suffix = '', target = 4): Ticks {
  let u = 0;
  while (u < BINARY_UNITS.length - 1 && max >= 1024 ** (u + 1)) u++;
  const scale = 1024 ** u;
  const m = Math.max(max, 0) / scale;
  const step = roundStep(m / target, u === 0 ? 1 : 0);
  const top = Math.max(step, Math.ceil(m / step - 1e-9) * step);
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return {
    ...ticksOf(step * scale, top * scale, (v) => (v === 0 ? '0' : `${Number((v / scale).toFixed(decimals))} ${BINARY_UNITS[u]}${suffix}`)),
  };
}

export function countTicks(max: number, target = 4): Ticks {
  const step = roundStep(max / target, 1);
  return ticksOf(step, Math.max(target, Math.ceil(max / step) * step), String);
}

const MIN = 60_000;
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440].map((m) => m * MIN);

/** Time-axis ticks: UTC multiples of the smallest round step giving at most `max` ticks in [t0, t1]. */
export function timeTicks(t0: number, t1: number, max = 6): { at: number; label: string }[] {
  const step = TIME_STEPS.find((s) => (t1 - t0) / s <= max) ?? TIME_STEPS[TIME_STEPS.length - 1]!;
  const out: { at: number; label: string }[] = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push({ at: t, label: new Date(t).toISOString().slice(11, 16) });
  return out;
}

function legend(names: readonly string[]): string {
  return `<ul class="legend">${names
    .map((name, i) => `<li><svg width="28" height="12" aria-hidden="true"><line x1="2" x2="26" y1="6" y2="6" class="${SERIES[i % SERIES.length]}"/></svg>${esc(name)}</li>`)
    .join('')}</ul>`;
}

function valueAxis(ticks: Ticks, title: string): string {
  let out = `<text class="axis-title" x="${-AXIS_W}" y="13">${esc(title)}</text>`;
  ticks.values.forEach((v, i) => {
    const y = TOP + PLOT_H - (PLOT_H * v) / ticks.top;
    out += `<line class="grid" x1="0" x2="100%" y1="${n(y)}" y2="${n(y)}"/><text x="-6" y="${n(y + 4)}" text-anchor="end">${esc(ticks.labels[i]!)}</text>`;
  });
  return out;
}

function chart(title: string, height: number, inner: string, axis = false): string {
  return `<svg class="chart${axis ? ' axis' : ''}" width="100%" height="${height}" role="img" aria-label="${esc(title)}" xmlns="http://www.w3.org/2000/svg">${inner}</svg>`;
}

export interface Bar {
  readonly label: string;
  readonly value: number;
  readonly text?: string;
  readonly title?: string;
  readonly tone?: number;
}

/** Vertical bars with labels below and values above; every second label hides on a narrow screen. */
export function barChart(title: string, bars: readonly Bar[], axisTitle: string): string {
  const ticks = countTicks(Math.max(0, ...bars.map((b) => b.value)));
  const slot = 1 / Math.max(1, bars.length);
  let out = valueAxis(ticks, axisTitle);
  bars.forEach((b, i) => {
    const h = (PLOT_H * b.value) / ticks.top;
    const y = TOP + PLOT_H - h;
    const mid = pct((i + 0.5) * slot);
    out += `<rect class="c0" x="${pct((i + 0.14) * slot)}" y="${n(y)}" width="${pct(slot * 0.72)}" height="${n(h)}" rx="2"><title>${esc(`${b.title ?? b.label}: ${b.text ?? b.value}`)}</title></rect>`;
    if (b.value > 0) out += `<text class="value" x="${mid}" y="${n(y - 4)}" text-anchor="middle">${esc(b.text ?? String(b.value))}</text>`;
    out += `<text${i % 2 === 1 ? ' class="alt"' : ''} x="${mid}" y="${TOP + PLOT_H + 16}" text-anchor="middle">${esc(b.label)}</text>`;
  });
  return chart(title, TOP + PLOT_H + X_LABELS_H, out, true);
}

export function hBarChart(title: string, bars: readonly Bar[], fmt: (v: number) => string = String, empty = 'none'): string {
  const rowH = 40;
  if (bars.length === 0) return chart(title, 40, `<text x="50%" y="24" text-anchor="middle">${esc(empty)}</text>`);
  // The longest bar takes 70 % of the width, leaving room for its value after it.
  const top = Math.max(1, ...bars.map((b) => b.value));
  let out = '';
  bars.forEach((b, i) => {
    const y = i * rowH;
    const w = b.value > 0 ? Math.max(0.005, (0.7 * b.value) / top) : 0;
    out += `<text class="label" x="0" y="${y + 14}">${esc(b.label)}</text>`;
    out += `<rect class="c${b.tone ?? i % 4}" x="0" y="${y + 20}" width="${pct(w)}" height="14" rx="2"/>`;
    out += `<text class="value" x="${pct(w)}" dx="6" y="${y + 32}">${esc(b.text ?? fmt(b.value))}</text>`;
  });
  return chart(title, bars.length * rowH, out);
}

export interface Line {
  readonly name: string;
  readonly points: readonly (readonly [number, number])[];
}

/** The time axis spans at least this much, so a fresh server's first minutes still get round ticks. */
const MIN_SPAN = 15 * MIN;

/** Lines over time with a legend and titled axes; times in UTC; `ticksFor` picks the value axis. */
export function lineChart(title: string, lines: readonly Line[], ticksFor: (max: number) => Ticks, axisTitle: string): string {
  const all = lines.flatMap((l) => l.points);
  const names = legend(lines.map((l) => l.name));
  if (all.length === 0) return names + chart(title, 60, `<text x="50%" y="34" text-anchor="middle">no data yet</text>`);
  const t1 = Math.max(...all.map((p) => p[0]));
  const t0 = Math.min(t1 - MIN_SPAN, ...all.map((p) => p[0]));
  const ticks = ticksFor(Math.max(0, ...all.map((p) => p[1])));
  const fx = (t: number): number => (t - t0) / (t1 - t0);
  const y = (v: number): number => PLOT_H - (PLOT_H * v) / ticks.top;
  let out = valueAxis(ticks, axisTitle);
  for (const tick of timeTicks(t0, t1)) {
    out += `<line class="tick" x1="${pct(fx(tick.at))}" x2="${pct(fx(tick.at))}" y1="${TOP + PLOT_H}" y2="${TOP + PLOT_H + 4}"/><text x="${pct(fx(tick.at))}" y="${TOP + PLOT_H + 18}" text-anchor="middle">${tick.label}</text>`;
  }
  out += `<text class="axis-title" x="50%" y="${TOP + PLOT_H + 38}" text-anchor="middle">Time (UTC)</text>`;
  let data = '';
  lines.forEach((l, i) => {
    const cls = SERIES[i % SERIES.length]!;
    if (l.points.length === 1) {
      const [t, v] = l.points[0]!;
      out += `<circle class="${cls} dot" cx="${pct(fx(t))}" cy="${n(TOP + y(v))}" r="${4 - Math.min(i, 1)}"/>`;
    } else if (l.points.length > 1) {
      data += `<polyline class="${cls}" vector-effect="non-scaling-stroke" fill="none" points="${l.points.map(([t, v]) => `${n(fx(t) * DATA_W)},${n(y(v))}`).join(' ')}"/>`;
    }
  });
  out += `<svg x="0" y="${TOP}" width="100%" height="${PLOT_H}" viewBox="0 0 ${DATA_W} ${PLOT_H}" preserveAspectRatio="none">${data}</svg>`;
  return names + chart(title, TOP + PLOT_H + 46, out, true);
}

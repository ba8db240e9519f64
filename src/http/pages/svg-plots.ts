import { esc } from './html.js';

/**
 * Inline SVG plots drawn on the server: no script, no library, a few hundred bytes each. They use
 * presentation attributes only (no style attributes), so the pages' strict CSP allows them.
 */

const W = 640;
const H = 220;
const PAD = { left: 64, right: 16, top: 16, bottom: 34 };
const COLORS = ['#2f6fde', '#e07b24', '#1f9d6a', '#b4261a', '#7b4fc9', '#5d6677'];

const n = (v: number): string => (Math.round(v * 10) / 10).toString();

function frame(title: string, inner: string, height = H): string {
  return `<svg viewBox="0 0 ${W} ${height}" role="img" aria-label="${esc(title)}" xmlns="http://www.w3.org/2000/svg" font-family="system-ui,sans-serif" font-size="11" fill="#1d2330">${inner}</svg>`;
}

/** A "nice" axis top: 1, 2 or 5 × 10^k at or above `max`. */
function niceMax(max: number): number {
  if (max <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

function yAxis(top: number, fmt: (v: number) => string): string {
  const plotH = H - PAD.top - PAD.bottom;
  let out = '';
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    const y = PAD.top + plotH - (plotH * i) / 4;
    out += `<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${n(y)}" y2="${n(y)}" stroke="#e6e9ef"/>`;
    out += `<text x="${PAD.left - 6}" y="${n(y + 4)}" text-anchor="end" fill="#5d6677">${esc(fmt(v))}</text>`;
  }
  return out;
}

export interface Bar {
  readonly label: string;
  readonly value: number;
  /** Text over the bar; defaults to the value. */
  readonly text?: string;
  /** Tooltip name; defaults to the label. */
  readonly title?: string;
  /** Fill; defaults to the palette in order. */
  readonly color?: string;
}

/** Vertical bars with labels below and values above (the size histogram). */
export function barChart(title: string, bars: readonly Bar[], fmt: (v: number) => string = String): string {
  // Counts: a top divisible by the four grid steps keeps the tick labels whole numbers.
  const top = Math.max(4, Math.ceil(Math.max(0, ...bars.map((b) => b.value)) / 4) * 4);
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const slot = plotW / Math.max(1, bars.length);
  let out = yAxis(top, fmt);
  bars.forEach((b, i) => {
    const h = (plotH * b.value) / top;
    const x = PAD.left + i * slot + slot * 0.12;
    const y = PAD.top + plotH - h;
    out += `<rect x="${n(x)}" y="${n(y)}" width="${n(slot * 0.76)}" height="${n(h)}" fill="${COLORS[0]}" rx="2"><title>${esc(`${b.title ?? b.label}: ${b.text ?? b.value}`)}</title></rect>`;
    if (b.value > 0) out += `<text x="${n(x + slot * 0.38)}" y="${n(y - 4)}" text-anchor="middle">${esc(b.text ?? fmt(b.value))}</text>`;
    out += `<text x="${n(x + slot * 0.38)}" y="${H - PAD.bottom + 16}" text-anchor="middle" fill="#5d6677">${esc(b.label)}</text>`;
  });
  return frame(title, out);
}

/** Horizontal bars, one per row (rejections by cause, savings breakdown). */
export function hBarChart(title: string, bars: readonly Bar[], fmt: (v: number) => string = String, empty = 'none'): string {
  const rowH = 26;
  const height = Math.max(1, bars.length) * rowH + 12;
  const labelW = 190;
  const plotW = W - labelW - 90;
  const top = Math.max(1, ...bars.map((b) => b.value));
  if (bars.length === 0) return frame(title, `<text x="${W / 2}" y="${height / 2 + 4}" text-anchor="middle" fill="#5d6677">${esc(empty)}</text>`, height);
  let out = '';
  bars.forEach((b, i) => {
    const y = 6 + i * rowH;
    const w = Math.max(b.value > 0 ? 2 : 0, (plotW * b.value) / top);
    out += `<text x="${labelW - 8}" y="${y + 15}" text-anchor="end">${esc(b.label)}</text>`;
    out += `<rect x="${labelW}" y="${y + 3}" width="${n(w)}" height="${rowH - 8}" rx="2" fill="${b.color ?? COLORS[i % COLORS.length]}"/>`;
    out += `<text x="${n(labelW + w + 6)}" y="${y + 15}">${esc(b.text ?? fmt(b.value))}</text>`;
  });
  return frame(title, out, height);
}

export interface Line {
  readonly name: string;
  /** [ms since epoch, value], oldest first. */
  readonly points: readonly (readonly [number, number])[];
}

const hhmm = (t: number): string => new Date(t).toISOString().slice(11, 16);

/** Lines over time with a legend (storage over time, transfer rates); times in UTC. */
export function lineChart(title: string, lines: readonly Line[], fmt: (v: number) => string = String): string {
  const all = lines.flatMap((l) => l.points);
  if (all.length === 0) return frame(title, `<text x="${W / 2}" y="${H / 2}" text-anchor="middle" fill="#5d6677">no data yet</text>`);
  const t0 = Math.min(...all.map((p) => p[0]));
  let t1 = Math.max(...all.map((p) => p[0]));
  if (t1 === t0) t1 = t0 + 60_000;
  const top = niceMax(Math.max(0, ...all.map((p) => p[1])));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const x = (t: number): number => PAD.left + (plotW * (t - t0)) / (t1 - t0);
  const y = (v: number): number => PAD.top + plotH - (plotH * v) / top;
  let out = yAxis(top, fmt);
  out += `<text x="${PAD.left}" y="${H - 8}" fill="#5d6677">${hhmm(t0)} UTC</text><text x="${W - PAD.right}" y="${H - 8}" text-anchor="end" fill="#5d6677">${hhmm(t1)} UTC</text>`;
  lines.forEach((l, i) => {
    const color = COLORS[i % COLORS.length]!;
    if (l.points.length === 1) {
      const [t, v] = l.points[0]!;
      out += `<circle cx="${n(x(t))}" cy="${n(y(v))}" r="3" fill="${color}"/>`;
    } else if (l.points.length > 1) {
      out += `<polyline fill="none" stroke="${color}" stroke-width="2" points="${l.points.map(([t, v]) => `${n(x(t))},${n(y(v))}`).join(' ')}"/>`;
    }
    const lx = PAD.left + 10 + i * 150;
    out += `<rect x="${lx}" y="${PAD.top - 12}" width="10" height="10" fill="${color}"/><text x="${lx + 14}" y="${PAD.top - 3}">${esc(l.name)}</text>`;
  });
  return frame(title, out);
}

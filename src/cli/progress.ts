import { bytes, duration } from './output.js';

/** What the progress view reads of a job (the server's job view). */
export interface JobProgressView {
  readonly id: string;
  readonly kind: string;
  readonly repository: string;
  readonly state: string;
  readonly objects_done: number;
  readonly objects_total: number | null;
  readonly bytes_done: number;
  readonly bytes_total: number | null;
  readonly started_at: string;
}

/** The stream the view draws on: stderr, so stdout keeps only the result (and --json stays clean). */
export interface ProgressStream {
  readonly isTTY?: boolean;
  readonly columns?: number;
  write(s: string): boolean;
}

/** Without a terminal, a plain line this often (and at every change of state). */
const PLAIN_EVERY_MS = 10_000;
/** The rate is taken over this much recent time, so it follows changes without jumping at every poll. */
const RATE_WINDOW_MS = 10_000;
const MIN_BAR = 10;

/** Progress by bytes with rate and ETA: on a terminal one line redrawn in place, never wider than it (so it cannot wrap); else a line now and then. */
export class ProgressView {
  readonly #out: ProgressStream;
  readonly #samples: { at: number; bytes: number }[] = [];
  #lastPlain = 0;
  #lastState = '';
  #drawn = false;

  constructor(out: ProgressStream) {
    this.#out = out;
  }

  get #tty(): boolean {
    return this.#out.isTTY === true;
  }

  show(j: JobProgressView): void {
    const now = Date.now();
    this.#samples.push({ at: now, bytes: j.bytes_done });
    while (this.#samples.length > 2 && now - this.#samples[0]!.at > RATE_WINDOW_MS) this.#samples.shift();
    const first = this.#samples[0]!;
    const rate = now - first.at >= 500 ? ((j.bytes_done - first.bytes) * 1000) / (now - first.at) : null;
    const total = j.bytes_total;
    const frac = total !== null && total > 0 ? Math.min(1, j.bytes_done / total) : j.state === 'done' ? 1 : 0;
    const elapsed = Math.max(0, (now - Date.parse(j.started_at)) / 1000);
    const eta = rate !== null && rate > 0 && total !== null && j.state === 'running' ? (total - j.bytes_done) / rate : null;
    const parts = {
      pct: `${(frac * 100).toFixed(0).padStart(3)}%`,
      size: `${bytes(j.bytes_done)} / ${bytes(total)}`,
      rate: rate === null ? '' : `${bytes(Math.max(0, rate))}/s`,
      eta: eta === null ? '' : `ETA ${duration(eta)}`,
      elapsed: `${duration(elapsed)} elapsed`,
      objects: `${j.objects_done}/${j.objects_total ?? '?'} objects`,
    };
    if (this.#tty) this.#drawLine(j, frac, parts);
    else if (now - this.#lastPlain >= PLAIN_EVERY_MS || j.state !== this.#lastState) {
      this.#lastPlain = now;
      const figures = [parts.pct.trim(), parts.size, parts.rate, parts.eta, parts.elapsed, parts.objects].filter((p) => p !== '');
      this.#out.write(`${j.kind} ${j.repository}: ${j.state}, ${figures.join(', ')}\n`);
    }
    this.#lastState = j.state;
  }

  #drawLine(j: JobProgressView, frac: number, p: Record<string, string>): void {
    const width = Math.max(20, (this.#out.columns ?? 80) - 1); // the last column would wrap on some terminals
    const head = `${j.kind} ${j.state === 'running' ? '' : `${j.state} `}`;
    // Most useful first; what does not fit is left out rather than wrapped.
    const optional = [p.size!, p.rate!, p.eta!, p.elapsed!, p.objects!].filter((s) => s !== '');
    let tail = ` ${p.pct}`;
    for (const s of optional) if (head.length + MIN_BAR + 2 + tail.length + 2 + s.length <= width) tail += `  ${s}`;
    const room = width - head.length - tail.length - 2;
    let line: string;
    if (room >= MIN_BAR) {
      const bar = Math.min(room, 40);
      const fill = Math.round(frac * bar);
      line = `${head}[${'#'.repeat(fill)}${'-'.repeat(bar - fill)}]${tail}`;
    } else line = `${head}${tail.trim()}`;
    this.#out.write(`\r${line.slice(0, width)}\x1b[K`);
    this.#drawn = true;
  }

  end(): void {
    if (this.#drawn) this.#out.write('\n');
    this.#drawn = false;
  }
}

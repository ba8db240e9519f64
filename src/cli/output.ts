/** How the CLI writes for people; colour only on a terminal and never with NO_COLOR (https://no-color.org). Scripts pass --json. */

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** A byte count in binary units: `512 B`, `1.5 GiB`; `?` when unknown. */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return '?';
  let u = 0;
  let v = n;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${UNITS[u]}`;
}

/** A duration for people: `42s`, `3m05s`, `1h02m`. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** Colours for one stream: the identity when it is not a terminal or NO_COLOR is set (any value). */
export class Paint {
  readonly #on: boolean;

  constructor(stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv) {
    this.#on = stream.isTTY === true && (env.NO_COLOR ?? '') === '' && env.TERM !== 'dumb';
  }

  #wrap(code: number, s: string): string {
    return this.#on ? `\x1b[${code}m${s}\x1b[0m` : s;
  }
  red(s: string): string {
    return this.#wrap(31, s);
  }
  green(s: string): string {
    return this.#wrap(32, s);
  }
  yellow(s: string): string {
    return this.#wrap(33, s);
  }
  bold(s: string): string {
    return this.#wrap(1, s);
  }
  dim(s: string): string {
    return this.#wrap(2, s);
  }
}

/** Rows under a header, each column as wide as its widest cell (numbers right-aligned). */
export function table(header: readonly string[], rows: readonly (readonly string[])[], rightAligned: ReadonlySet<number> = new Set()): string {
  const width = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (rightAligned.has(i) ? c.padStart(width[i]!) : i === cells.length - 1 ? c : c.padEnd(width[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}

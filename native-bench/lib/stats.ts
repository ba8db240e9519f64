/** The figures' arithmetic, one copy for every bench. */

/** MB/s with MB = 10^6 bytes, as dd reports and as the targets are written. */
export const mbps = (bytes: number, ms: number): number => bytes / 1e6 / (ms / 1000);

/** The median of a non-empty list (the mean of the middle two for an even count); the list is not changed. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** The p-th percentile (nearest rank) of `values`, NaN for none; the list is not changed. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

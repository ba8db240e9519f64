/**
 * Single byte-range parsing (RFC 9110 §14.1.2; docs/behaviour.md, "Downloads"): 206 when satisfiable,
 * 416 with the real size when not; a header that cannot be parsed or asks for several ranges is ignored.
 */
export type RangeResult =
  | { kind: 'none' }
  | { kind: 'range'; start: number; end: number } // inclusive end
  | { kind: 'unsatisfiable' };

// 16 digits keep every value exact in a double (2^53 ≈ 9.0e15); longer offsets are beyond any object.
const MAX_DIGITS = 16;

function toNumber(digits: string): number {
  return digits.length > MAX_DIGITS ? Number.MAX_SAFE_INTEGER : Number(digits);
}

export function parseRange(header: string, total: number): RangeResult {
  const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (!m) return { kind: 'none' };
  const [, a, b] = m as unknown as [string, string, string];
  if (a === '' && b === '') return { kind: 'none' };
  if (a === '') {
    // Suffix range: the last n bytes.
    const n = toNumber(b);
    if (n === 0 || total === 0) return { kind: 'unsatisfiable' };
    return { kind: 'range', start: Math.max(0, total - n), end: total - 1 };
  }
  const start = toNumber(a);
  if (b !== '') {
    const end = toNumber(b);
    if (end < start) return { kind: 'none' }; // syntactically invalid: ignored, per RFC 9110
    if (start >= total) return { kind: 'unsatisfiable' };
    return { kind: 'range', start, end: Math.min(end, total - 1) };
  }
  if (start >= total) return { kind: 'unsatisfiable' };
  return { kind: 'range', start, end: total - 1 };
}

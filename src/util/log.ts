/** How much an event matters: `error` needs someone to act, `warn` may, `info` is the record. */
export type LogLevel = 'info' | 'warn' | 'error';

/**
 * One JSON line per event on stdout: `{"time","level","msg",...fields}`. The level travels as the
 * field `level` (default `info`), so code handed a plain `(msg, fields)` logger sets it too.
 * Callers never pass tokens (docs/architecture.md, "Conventions").
 */
export function log(msg: string, fields: object = {}): void {
  const { level = 'info', ...rest } = fields as { level?: LogLevel };
  process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...rest })}\n`);
}

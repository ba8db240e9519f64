/** How much an event matters: `error` needs someone to act, `warn` may, `info` is the record. */
export type LogLevel = 'info' | 'warn' | 'error';

/**
 * One JSON line per event on stdout: `{"time","level","msg",...fields}`; a plain `(msg, fields)`
 * logger sets the level as a field. Callers never pass tokens (docs/architecture.md, "Conventions").
 */
export function log(msg: string, fields: object = {}): void {
  const { level = 'info', ...rest } = fields as { level?: LogLevel };
  process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...rest })}\n`);
}

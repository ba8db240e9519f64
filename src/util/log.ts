/** One JSON line per event on stdout. Callers never pass tokens (design §3). */
export function log(msg: string, fields: object = {}): void {
  process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), msg, ...fields })}\n`);
}

/**
 * The node options the server is started with: package.json's `start` and `start:prod`, the systemd
 * unit, the Docker image, and the tests' and the bench's servers
 * (test/unit/config/node-flags.test.ts holds them to this list).
 *
 * `--max-semi-space-size=4`: V8's young generation grows under load to two 8 MiB semi-spaces and
 * stays resident until about 10 s of rest; capped, the peak after bursts of small uploads is lower
 * at no measurable cost. Only given at start: V8 reads it when it sets up the heap.
 */
export const SERVER_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4'];

/**
 * The server flags missing from how this process was started (its command line and NODE_OPTIONS);
 * the server still runs without them, with more memory under load.
 */
export function missingServerFlags(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  const given = new Set([...execArgv, ...(nodeOptions ?? '').split(/\s+/).filter(Boolean)]);
  return SERVER_NODE_FLAGS.filter((f) => !given.has(f));
}

/**
 * The server refuses to start because something it must own alone is taken: the listening port, or
 * the data directory (another process serves it). main.ts prints the message on one line and exits
 * with status 2, like a configuration error: retrying the same start would fail the same way.
 */
export class StartRefusedError extends Error {
  override readonly name = 'StartRefusedError';
}

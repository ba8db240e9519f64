/** Something the server must own alone is taken (the port, the data directory): exit status 2, as retrying would fail the same way. */
export class StartRefusedError extends Error {
  override readonly name = 'StartRefusedError';
}

import t from 'tap';
import { framingError } from '../../../src/http/framing.js';

// RFC 9112 §6.3, as framingError applies it to the framing headers uWS received (every occurrence).
t.test('framingError', async (t) => {
  const code = (lengths: string[], codings: string[]): string | null => framingError(lengths, codings)?.code ?? null;
  t.equal(code([], []), null, 'no body framing at all');
  t.equal(code(['0'], []), null, 'one Content-Length');
  t.equal(code(['00123'], []), null, 'leading zeros are still digits');
  t.equal(code(['999999999'], []), null, 'just under what uWS refuses');
  t.equal(code([], ['chunked']), null, 'chunked');
  t.equal(code([], ['Chunked']), null, 'coding names are case-insensitive');
  for (const bad of [['0', '40'], ['5', '5'], ['+5'], ['5, 5'], [''], ['-1'], ['1e3']]) t.equal(code(bad, []), 'LFS_ERR_BAD_FRAMING', `Content-Length ${JSON.stringify(bad)}`);
  for (const bad of [['identity'], ['gzip'], ['xchunked'], ['gzip, chunked'], ['chunked, gzip'], ['chunked', 'chunked'], ['']]) t.equal(code([], bad), 'LFS_ERR_BAD_FRAMING', `Transfer-Encoding ${JSON.stringify(bad)}`);
  t.equal(code(['5'], ['chunked']), 'LFS_ERR_BAD_FRAMING', 'both');
  t.equal(code(['1000000000'], []), 'LFS_ERR_LENGTH_TOO_LARGE', '1e9: the HTTP layer cannot read it');
  t.equal(code(['99999999999999999999'], []), 'LFS_ERR_LENGTH_TOO_LARGE', 'far past it');
  t.equal(framingError(['0', '1'], [])?.headers.Connection, 'close', 'the answer says the connection closes');
});

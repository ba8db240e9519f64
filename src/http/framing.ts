import { lfsError, type LfsError } from '../errors/errors.js';

/** uWS closes the connection after a Content-Length of this many bytes or more; chunked bodies have no such limit. */
const UWS_MAX_CONTENT_LENGTH = 1_000_000_000;

/**
 * The error to answer when a body's extent is ambiguous (RFC 9112 §6.3: a bad Content-Length, or a
 * final coding other than chunked, MUST get 400). uWS takes the first Content-Length and decodes any
 * Transfer-Encoding as chunked; a proxy reading them otherwise would be open to request smuggling.
 */
export function framingError(contentLengths: readonly string[], transferEncodings: readonly string[]): LfsError | null {
  const refuse = (why: string): LfsError => lfsError('LFS_ERR_BAD_FRAMING', `${why} (RFC 9112 §6.3); the connection is closed`, { Connection: 'close' });
  if (transferEncodings.length > 0) {
    if (contentLengths.length > 0) return refuse('Both Transfer-Encoding and Content-Length are set');
    if (transferEncodings.length > 1) return refuse('Transfer-Encoding is given more than once');
    if (transferEncodings[0]!.trim().toLowerCase() !== 'chunked') return refuse('Transfer-Encoding must be exactly "chunked"');
    return null;
  }
  if (contentLengths.length === 0) return null;
  if (contentLengths.length > 1) return refuse('Content-Length is given more than once');
  const value = contentLengths[0]!.trim();
  if (!/^\d+$/.test(value)) return refuse('Content-Length must be a number of bytes');
  if (Number(value) >= UWS_MAX_CONTENT_LENGTH) return lfsError('LFS_ERR_LENGTH_TOO_LARGE', undefined, { Connection: 'close' });
  return null;
}

/** Far above any forge token in use (GitHub's fine-grained tokens, the longest, are 93 characters). */
export const MAX_TOKEN_BYTES = 512;

/**
 * Visible ASCII, no space: every forge's tokens fit (RFC 6750's b64token is a subset), and the token
 * goes raw into the header of the forge call, where a control character, a line break or a non-Latin-1
 * character makes undici refuse to send it.
 */
const TOKEN_CHARS = /^[\x21-\x7e]+$/;

/** True when `token` could have been issued by a forge: not empty, at most MAX_TOKEN_BYTES, visible ASCII. */
export function isPlausibleToken(token: string): boolean {
  return token.length > 0 && token.length <= MAX_TOKEN_BYTES && TOKEN_CHARS.test(token);
}

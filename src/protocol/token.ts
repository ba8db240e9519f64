/** Far above any forge token in use (GitHub's fine-grained tokens, the longest, are 93 characters). */
export const MAX_TOKEN_BYTES = 512;

/** Visible ASCII, no space (RFC 6750's b64token is a subset): the token goes raw into the forge call's header, where undici refuses anything else. */
const TOKEN_CHARS = /^[\x21-\x7e]+$/;

export function isPlausibleToken(token: string): boolean {
  return token.length > 0 && token.length <= MAX_TOKEN_BYTES && TOKEN_CHARS.test(token);
}

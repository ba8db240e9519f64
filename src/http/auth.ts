import { lfsError } from '../errors/errors.js';
import { isPlausibleToken } from '../protocol/token.js';
import { CHALLENGE } from '../service/access-service.js';

/** `token` when it can be a forge token, else 401 with `challenge` (none for the dashboard, so a browser shows no password prompt). */
export function usableToken(token: string, challenge: Record<string, string> = CHALLENGE): string {
  if (!isPlausibleToken(token)) throw lfsError('LFS_ERR_AUTH_MALFORMED', undefined, challenge);
  return token;
}

/** The Basic password (any username) or Bearer token of an Authorization header; null when none, 401 when no forge could accept it. */
export function tokenFromAuthorization(header: string, challenge: Record<string, string> = CHALLENGE): string | null {
  const token = parseAuthorization(header);
  return token === null ? null : usableToken(token, challenge);
}

/** The token a header carries, unchecked, or null; never throws (best-effort lookups such as the request log's). */
export function parseAuthorization(header: string): string | null {
  if (header === '') return null;
  const space = header.indexOf(' ');
  if (space < 0) return null;
  const scheme = header.slice(0, space).toLowerCase();
  const value = header.slice(space + 1).trim();
  if (value === '') return null;
  if (scheme === 'bearer' || scheme === 'token') return value;
  if (scheme !== 'basic') return null;
  let decoded: string;
  try {
    decoded = Buffer.from(value, 'base64').toString('utf8');
  } catch {
    return null;
  }
  const colon = decoded.indexOf(':');
  if (colon < 0) return decoded === '' ? null : decoded; // `token` alone as the username
  const user = decoded.slice(0, colon);
  const password = decoded.slice(colon + 1);
  // Gitea-style "token as username" with an empty or x-oauth-basic password.
  if (password === '' || password === 'x-oauth-basic') return user === '' ? null : user;
  return password;
}

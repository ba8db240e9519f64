/**
 * Pulls the token out of an Authorization header (spec Authentication rule 2): the password of
 * HTTP Basic (any username) or a Bearer token. Returns null when there is none; never logs it.
 */
export function tokenFromAuthorization(header: string): string | null {
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

import { ROUTES, servedRoutes, type RouteName } from '../../src/http/route-policy.js';

/**
 * The routes the attacker's tests walk, taken from the route table itself, so a route added to
 * ROUTES is attacked without anyone remembering to list it here.
 */

/** A concrete path for a route pattern, in repository `acme/game`. */
export function pathOf(pattern: string, oid = 'a'.repeat(64)): string {
  return pattern.replace(':org', 'acme').replace(':repo', 'game').replace(':oid', oid).replace(':id', 'abc');
}

/** Every route that reads a JSON body: [METHOD, path]. */
export const JSON_BODY_ROUTES: readonly [string, string][] = Object.values(ROUTES)
  .filter((r) => r.body.kind === 'json')
  .map((r) => [r.method === 'del' ? 'DELETE' : r.method.toUpperCase(), pathOf(r.pattern)]);

/** Every route a node serves (route-policy's servedRoutes): [name, METHOD, path]. */
export function servedRouteWalk(cacheMode: boolean): [RouteName, string, string][] {
  return servedRoutes(cacheMode).map((name) => {
    const r = ROUTES[name];
    return [name, r.method === 'del' ? 'DELETE' : r.method.toUpperCase(), pathOf(r.pattern)];
  });
}

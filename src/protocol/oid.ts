/** An object id: 64 lowercase hex digits, the sha256 of the content (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md). */
export type Oid = string & { readonly __brand: 'Oid' };

const OID_RE = /^[0-9a-f]{64}$/;

/** The only way to get an Oid: anything else is refused, so an oid can safely become a file name. */
export function parseOid(value: unknown): Oid | null {
  return typeof value === 'string' && OID_RE.test(value) ? (value as Oid) : null;
}

/** `ab/cd/abcd…`: the two-level fan-out used by the shared store and the legacy per-repository layout. */
export function shardPath(oid: Oid): string {
  return `${oid.slice(0, 2)}/${oid.slice(2, 4)}/${oid}`;
}

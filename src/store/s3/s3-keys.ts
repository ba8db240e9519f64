import { createHash, randomBytes } from 'node:crypto';
import { parseOid, shardPath, type Oid } from '../../protocol/oid.js';

/**
 * The bucket layout under the configured prefix (docs/s3.md). Every key is built here from an Oid
 * (64 hex digits, by its brand) or a hash, so no client-supplied text ever becomes part of a key.
 * - `objects/ab/cd/<oid>`: the shared, content-addressed keyspace (what `list()` walks);
 * - `incoming/<repo hash>/<oid>`: presigned uploads, unverified, until promoteIncoming();
 * - `staging/<name>.<random>`: promotion copies and probes, never visible as objects;
 * - `trash/ab/cd/<oid>`: the last deleted (or replaced) copy, kept for readers opened before;
 * - `quarantine/<oid>.<ms>`: bad copies moved aside by an audit, kept for inspection.
 */
export class S3Keys {
  /** '' or ending with '/'. */
  readonly prefix: string;

  constructor(prefix: string) {
    this.prefix = prefix;
  }

  get objects(): string {
    return `${this.prefix}objects/`;
  }
  get incoming(): string {
    return `${this.prefix}incoming/`;
  }
  get staging(): string {
    return `${this.prefix}staging/`;
  }
  get trash(): string {
    return `${this.prefix}trash/`;
  }
  get quarantine(): string {
    return `${this.prefix}quarantine/`;
  }

  /** Final key of an oid. */
  object(oid: Oid): string {
    return `${this.objects}${shardPath(oid)}`;
  }

  /** Where delete() and a replacing write leave the previous copy for readers still open. */
  trashOf(oid: Oid): string {
    return `${this.trash}${shardPath(oid)}`;
  }

  quarantineOf(oid: Oid, atMs: number): string {
    return `${this.quarantine}${oid}.${atMs}`;
  }

  /** Per-repository landing key of a presigned upload; the repository key is hashed (no odd characters in keys). */
  incomingOf(repoKey: string, oid: Oid): string {
    const repo = createHash('sha256').update(repoKey).digest('hex').slice(0, 32);
    return `${this.incoming}${repo}/${oid}`;
  }

  /** A fresh key no link can write (random suffix). */
  stagingOf(name: string): string {
    return `${this.staging}${name}.${randomBytes(8).toString('hex')}`;
  }

  /** The oid of an `objects/ab/cd/<oid>` key with a matching shard, or null for anything else in that folder. */
  oidOfObjectKey(key: string): Oid | null {
    if (!key.startsWith(this.objects)) return null;
    const m = /^([0-9a-f]{2})\/([0-9a-f]{2})\/([0-9a-f]{64})$/.exec(key.slice(this.objects.length));
    if (m === null) return null;
    const oid = parseOid(m[3]);
    return oid !== null && m[1] === oid.slice(0, 2) && m[2] === oid.slice(2, 4) ? oid : null;
  }
}

import { createHash, randomBytes } from 'node:crypto';
import { parseOid, shardPath, type Oid } from '../../protocol/oid.js';

/**
 * The bucket layout under the prefix (docs/s3.md). Every key is built from an Oid or a hash, never
 * from client text: `objects/` (shared), `incoming/` (presigned, unverified), `staging/`, `trash/`
 * (the last replaced copy, for open readers) and `quarantine/`.
 */
export class S3Keys {
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

  stagingOf(name: string): string {
    return `${this.staging}${name}.${randomBytes(8).toString('hex')}`;
  }

  oidOfObjectKey(key: string): Oid | null {
    if (!key.startsWith(this.objects)) return null;
    const m = /^([0-9a-f]{2})\/([0-9a-f]{2})\/([0-9a-f]{64})$/.exec(key.slice(this.objects.length));
    if (m === null) return null;
    const oid = parseOid(m[3]);
    return oid !== null && m[1] === oid.slice(0, 2) && m[2] === oid.slice(2, 4) ? oid : null;
  }
}

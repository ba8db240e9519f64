import type { Oid } from '../../protocol/oid.js';
import { settleReference, TRUSTED_COMMIT, type PendingReference, type ReferenceOutcome } from '../index-rows.js';
import type { ObjectIndex, ObjectRow, UploadCommit } from '../index-types.js';
import type { Sql } from './pg-client.js';

/** PostgreSQL chose this statement's transaction to break a deadlock (SQLSTATE 40P01): nothing of it was written. */
const isDeadlock = (e: unknown): boolean => (e as { code?: unknown } | null)?.code === '40P01';
const DEADLOCK_TRIES = 3;

/** Objects and references on PostgreSQL, one statement per call; references group-committed, one statement in flight per node. */
export class PgObjects implements ObjectIndex {
  readonly #sql: Sql;
  #pending: PendingReference[] = [];
  #committing = false;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  async findInRepo(repo: string, oid: Oid): Promise<ObjectRow | null> {
    // A quarantined object is missing to batch, download and verify until good bytes arrive.
    const rows = await this.#sql<{ size: number; stored_size: number }[]>`
      SELECT o.size, o.stored_size FROM repo_objects r JOIN objects o ON o.oid = r.oid
      WHERE r.repo = ${repo} AND r.oid = ${oid} AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.oid = r.oid)`;
    const r = rows[0];
    return r === undefined ? null : { oid, size: r.size, storedSize: r.stored_size };
  }

  async findManyInRepo(repo: string, oids: readonly Oid[]): Promise<Map<Oid, ObjectRow>> {
    const found = new Map<Oid, ObjectRow>();
    if (oids.length === 0) return found;
    if (oids.length === 1) {
      // The common batch of one small upload: the plain lookup, cheaper than an array parameter.
      const row = await this.findInRepo(repo, oids[0]!);
      if (row !== null) found.set(row.oid, row);
      return found;
    }
    const rows = await this.#sql<{ oid: Oid; size: number; stored_size: number }[]>`
      SELECT r.oid, o.size, o.stored_size FROM repo_objects r JOIN objects o ON o.oid = r.oid
      WHERE r.repo = ${repo} AND r.oid = ANY(${oids as Oid[]}::text[]) AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.oid = r.oid)`;
    for (const r of rows) found.set(r.oid, { oid: r.oid, size: r.size, storedSize: r.stored_size });
    return found;
  }

  async findShared(oid: Oid): Promise<ObjectRow | null> {
    const rows = await this.#sql<{ size: number; stored_size: number }[]>`SELECT size, stored_size FROM objects WHERE oid = ${oid}`;
    const r = rows[0];
    return r === undefined ? null : { oid, size: r.size, storedSize: r.stored_size };
  }

  async hasAny(): Promise<boolean> {
    const rows = await this.#sql<{ n: boolean }[]>`SELECT EXISTS (SELECT 1 FROM objects) AS n`;
    return rows[0]!.n;
  }

  async isQuarantined(oid: Oid): Promise<boolean> {
    const rows = await this.#sql<{ n: boolean }[]>`SELECT EXISTS (SELECT 1 FROM quarantine WHERE oid = ${oid}) AS n`;
    return rows[0]!.n;
  }

  addReference(repo: string, oid: Oid, size: number, storedSize: number, commit?: UploadCommit): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#pending.push({ repo, oid, size, storedSize, commit, resolve, reject });
      // Uploads finishing while a statement commits go together in the next.
      if (this.#pending.length === 1 && !this.#committing) setImmediate(() => void this.#flush());
    });
  }

  /** Group commit: at most one reference statement in flight per node, each taking all that waits. */
  async #flush(): Promise<void> {
    this.#committing = true;
    try {
      while (this.#pending.length > 0) await this.#flushPending();
    } finally {
      this.#committing = false;
    }
  }

  async #flushPending(): Promise<void> {
    const pending = this.#pending;
    this.#pending = [];
    // One statement per sweep acknowledged and setting checked (one in practice).
    const groups = new Map<string, PendingReference[]>();
    for (const r of pending) {
      const c = r.commit ?? TRUSTED_COMMIT;
      const key = JSON.stringify([c.ackedSweep, c.setting?.key ?? null, c.setting?.value ?? null]);
      const g = groups.get(key);
      if (g === undefined) groups.set(key, [r]);
      else g.push(r);
    }
    await Promise.all([...groups.values()].map((rows) => this.#commitGroup(rows)));
  }

  async #commitGroup(rows: PendingReference[]): Promise<void> {
    try {
      const outcomes = await this.#insertReferences(rows);
      rows.forEach((r, i) => settleReference(r, outcomes[i]!));
    } catch (e) {
      if (rows.length === 1 && !isDeadlock(e)) return rows[0]!.reject(e);
      // One row's failure must not fail the others: each again in a statement of its own.
      await Promise.all(rows.map((r) => this.#insertAlone(r)));
    }
  }

  /** One reference in a statement of its own; a deadlock with another node's batch (rare: see the function's lock order) is tried again. */
  async #insertAlone(r: PendingReference): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        const [outcome] = await this.#insertReferences([r]);
        return settleReference(r, outcome!);
      } catch (e) {
        if (!isDeadlock(e) || attempt === DEADLOCK_TRIES) return r.reject(e);
      }
    }
  }

  /** Objects, references and ended in-flight rows for `rows` in one statement (stowage_add_references, migration 002). */
  async #insertReferences(rows: readonly PendingReference[]): Promise<ReferenceOutcome[]> {
    const commits = rows.map((r) => r.commit ?? TRUSTED_COMMIT);
    const { ackedSweep, setting } = commits[0]!; // alike across the group (#flush)
    const result = await this.#sql<{ n: number; outcome: ReferenceOutcome }[]>`
      SELECT n, outcome FROM stowage_add_references(
        ${rows.map((r) => r.repo)}::text[], ${rows.map((r) => r.oid)}::text[], ${rows.map((r) => r.size)}::int8[], ${rows.map((r) => r.storedSize)}::int8[],
        ${commits.map((c) => (c.storedVerified ? 't' : 'f'))}::text[]::bool[] /* postgres.js sends a boolean array as one boolean */, ${commits.map((c) => c.ticket)}::int8[], ${ackedSweep}::int8,
        ${setting?.key ?? null}::text, ${setting?.value ?? null}::text, ${Date.now()}::int8)`;
    const outcomes = new Array<ReferenceOutcome>(rows.length);
    for (const r of result) outcomes[Number(r.n) - 1] = r.outcome;
    return outcomes;
  }

  async restoreReference(repo: string, oid: Oid, size: number, storedSize: number): Promise<void> {
    // Proves nothing about the bytes now, so it never lifts a quarantine.
    const now = Date.now();
    await this.#sql`
      WITH new_object AS (
        INSERT INTO objects (oid, size, stored_size, created_at) VALUES (${oid}, ${size}::int8, ${storedSize}::int8, ${now}::int8)
        ON CONFLICT (oid) DO NOTHING
      )
      INSERT INTO repo_objects (repo, oid, created_at) VALUES (${repo}, ${oid}, ${now}::int8) ON CONFLICT (repo, oid) DO NOTHING`;
  }

  async setStoredSize(oid: Oid, storedSize: number): Promise<void> {
    await this.#sql`UPDATE objects SET stored_size = ${storedSize}::int8 WHERE oid = ${oid}`;
  }
}

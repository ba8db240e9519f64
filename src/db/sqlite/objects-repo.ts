import type { Statement } from 'better-sqlite3';
import type { Oid } from '../../protocol/oid.js';
import { settleReference, TRUSTED_COMMIT, type PendingReference, type ReferenceOutcome } from '../index-rows.js';
import { NO_SWEEPS, type ObjectIndex, type ObjectRow, type UploadCommit } from '../index-types.js';
import type { Db } from './database.js';
import type { QuarantineHint } from './quarantine-hint.js';

export class ObjectsRepo implements ObjectIndex {
  readonly #getInRepo: Statement<[string, string], { size: number; stored_size: number }>;
  readonly #getObject: Statement<[string], { size: number; stored_size: number }>;
  readonly #insertObject: Statement<[string, number, number, number]>;
  readonly #insertRef: Statement<[string, string, number]>;
  readonly #addRefs: (rows: readonly PendingReference[]) => ReferenceOutcome[];
  readonly #findMany: (repo: string, oids: readonly Oid[]) => Map<Oid, ObjectRow>;
  #pending: PendingReference[] = [];
  readonly #restoreRef: (repo: string, oid: Oid, size: number, storedSize: number) => void;
  readonly #setStoredSize: Statement<[number, string]>;
  readonly #unquarantine: Statement<[string]>;
  readonly #refresh: Statement<[number, number, string]>;
  readonly #isQuarantined: Statement<[string], { n: number }>;
  readonly #anyObject: Statement<[], { n: number }>;
  readonly #hasRef: Statement<[string, string], { n: number }>;
  readonly #quarantine: QuarantineHint;

  constructor(db: Db, quarantine: QuarantineHint) {
    this.#quarantine = quarantine;
    this.#getInRepo = db.prepare(
      'SELECT o.size, o.stored_size FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ? AND r.oid = ?' +
        // Quarantined objects (docs/maintenance.md) are missing to batch, download and verify until good bytes arrive.
        ' AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.oid = r.oid)',
    );
    this.#unquarantine = db.prepare('DELETE FROM quarantine WHERE oid = ?');
    this.#refresh = db.prepare('UPDATE objects SET size = ?, stored_size = ? WHERE oid = ?');
    this.#isQuarantined = db.prepare('SELECT COUNT(*) AS n FROM quarantine WHERE oid = ?');
    this.#anyObject = db.prepare('SELECT EXISTS (SELECT 1 FROM objects) AS n');
    this.#hasRef = db.prepare('SELECT COUNT(*) AS n FROM repo_objects r JOIN objects o ON o.oid = r.oid WHERE r.repo = ? AND r.oid = ?');
    this.#getObject = db.prepare('SELECT size, stored_size FROM objects WHERE oid = ?');
    this.#insertObject = db.prepare('INSERT OR IGNORE INTO objects (oid, size, stored_size, created_at) VALUES (?, ?, ?, ?)');
    this.#insertRef = db.prepare('INSERT OR IGNORE INTO repo_objects (repo, oid, created_at) VALUES (?, ?, ?)');
    const sweepMissed = db.prepare<[number], { n: number }>('SELECT COUNT(*) AS n FROM sweeps WHERE sweep > ? AND deleting = 1');
    const endUpload = db.prepare<[number]>('DELETE FROM uploads_in_flight WHERE ticket = ?');
    const setting = db.prepare<[string], { value: string }>('SELECT value FROM settings WHERE key = ?');
    // The same decisions as PostgreSQL's stowage_add_references (migration 002), row by row.
    const addRow = (r: PendingReference, now: number): ReferenceOutcome => {
      const c = r.commit ?? TRUSTED_COMMIT;
      if (c.ackedSweep !== NO_SWEEPS && sweepMissed.get(c.ackedSweep)!.n > 0) return 'sweep_missed';
      if (c.setting !== null && (setting.get(c.setting.key)?.value ?? null) !== c.setting.value) return 'settings_changed';
      if (!c.storedVerified && this.#isQuarantined.get(r.oid)!.n > 0) return 'quarantined';
      this.#insertObject.run(r.oid, r.size, r.storedSize, now);
      this.#insertRef.run(r.repo, r.oid, now);
      // Good bytes of a quarantined object just arrived (verified by the writer): it is healed.
      if (!this.#quarantine.knownEmpty && this.#unquarantine.run(r.oid).changes > 0) {
        this.#refresh.run(r.size, r.storedSize, r.oid);
        this.#quarantine.changed();
      }
      if (c.ticket !== null) endUpload.run(c.ticket);
      return 'ok';
    };
    this.#addRefs = db.transaction((rows: readonly PendingReference[]) => {
      const now = Date.now();
      return rows.map((r) => addRow(r, now));
    });
    // Lookups take microseconds in process, so no IN (...) query; one read transaction for them all
    // saves taking and dropping WAL read locks per lookup.
    this.#findMany = db.transaction((repo: string, oids: readonly Oid[]) => {
      const found = new Map<Oid, ObjectRow>();
      for (const oid of oids) {
        const row = this.#getInRepo.get(repo, oid);
        if (row) found.set(oid, { oid, size: row.size, storedSize: row.stored_size });
      }
      return found;
    });
    this.#setStoredSize = db.prepare('UPDATE objects SET stored_size = ? WHERE oid = ?');
    this.#restoreRef = db.transaction((repo: string, oid: Oid, size: number, storedSize: number) => {
      const now = Date.now();
      this.#insertObject.run(oid, size, storedSize, now);
      this.#insertRef.run(repo, oid, now);
    });
  }

  async findInRepo(repo: string, oid: Oid): Promise<ObjectRow | null> {
    const row = this.#getInRepo.get(repo, oid);
    return row ? { oid, size: row.size, storedSize: row.stored_size } : null;
  }

  async findManyInRepo(repo: string, oids: readonly Oid[]): Promise<Map<Oid, ObjectRow>> {
    return this.#findMany(repo, oids);
  }

  async findShared(oid: Oid): Promise<ObjectRow | null> {
    const row = this.#getObject.get(oid);
    return row ? { oid, size: row.size, storedSize: row.stored_size } : null;
  }

  async hasAny(): Promise<boolean> {
    return this.#anyObject.get()!.n === 1;
  }

  async isQuarantined(oid: Oid): Promise<boolean> {
    return this.#quarantine.maybeAny && this.#isQuarantined.get(oid)!.n > 0;
  }

  /** Journal replay: puts back a reference the index may have lost; it proves nothing about the bytes now, so never lifts a quarantine. */
  async restoreReference(repo: string, oid: Oid, size: number, storedSize: number): Promise<void> {
    // Read first: a reference already held needs no write, so a start on a full disk only defers
    // what the index really lost.
    if (this.#hasRef.get(repo, oid)!.n > 0) return;
    this.#restoreRef(repo, oid, size, storedSize);
  }

  async setStoredSize(oid: Oid, storedSize: number): Promise<void> {
    this.#setStoredSize.run(storedSize, oid);
  }

  addReference(repo: string, oid: Oid, size: number, storedSize: number, commit?: UploadCommit): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#pending.push({ repo, oid, size, storedSize, commit, resolve, reject });
      if (this.#pending.length === 1) queueMicrotask(() => this.#flushPending());
    });
  }

  #flushPending(): void {
    const rows = this.#pending;
    this.#pending = [];
    try {
      const outcomes = this.#addRefs(rows);
      rows.forEach((r, i) => settleReference(r, outcomes[i]!));
    } catch {
      // One row's failure must not fail the others: retry each in a transaction of its own.
      for (const r of rows) {
        try {
          settleReference(r, this.#addRefs([r])[0]!);
        } catch (e) {
          r.reject(e);
        }
      }
    }
  }
}

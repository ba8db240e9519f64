import type { Statement } from 'better-sqlite3';
import type { Oid } from '../../protocol/oid.js';
import type { DropOutcome, JobIndex, JobProgress, JobRow, MaintenanceIndex, RepoObjectRow } from '../index-types.js';
import { KEEP_JOBS, toJob, type RawJob } from '../index-rows.js';
import type { Db } from './database.js';
import type { QuarantineHint } from './quarantine-hint.js';

/** The jobs table and the per-repository job leases. Every statement prepared once. */
export class JobsRepo implements JobIndex {
  readonly #insert: Statement<[string, string, string, number, number, string]>;
  readonly #progress: Statement<[number, number | null, number, number | null, string]>;
  readonly #finish: Statement<[string, string | null, string | null, number, number, number | null, number, number | null, string]>;
  readonly #get: Statement<[string], RawJob>;
  readonly #recent: Statement<[number], RawJob>;
  readonly #recentOf: Statement<[string, number], RawJob>;
  readonly #interruptAll: Statement<[number]>;
  readonly #interruptDead: Statement<[number, number]>;
  readonly #prune: Statement<[number]>;
  readonly #acquire: Statement<[string, string, number, number], { node: string }>;
  readonly #release: Statement<[string, string]>;

  constructor(db: Db) {
    this.#insert = db.prepare(
      "INSERT INTO jobs (id, kind, repo, state, dry_run, objects_done, bytes_done, started_at, node) VALUES (?, ?, ?, 'running', ?, 0, 0, ?, ?)",
    );
    this.#progress = db.prepare('UPDATE jobs SET objects_done = ?, objects_total = ?, bytes_done = ?, bytes_total = ? WHERE id = ?');
    this.#finish = db.prepare(
      'UPDATE jobs SET state = ?, report = ?, error = ?, finished_at = ?, objects_done = ?, objects_total = ?, bytes_done = ?, bytes_total = ? WHERE id = ?',
    );
    this.#get = db.prepare('SELECT * FROM jobs WHERE id = ?');
    this.#recent = db.prepare('SELECT * FROM jobs ORDER BY started_at DESC LIMIT ?');
    // The table holds at most KEEP_JOBS rows, so a scan per call is cheap without an index on repo.
    this.#recentOf = db.prepare('SELECT * FROM jobs WHERE repo = ? ORDER BY started_at DESC LIMIT ?');
    this.#interruptAll = db.prepare("UPDATE jobs SET state = 'interrupted', finished_at = ? WHERE state = 'running'");
    this.#interruptDead = db.prepare(
      "UPDATE jobs SET state = 'interrupted', finished_at = ? WHERE state = 'running' AND node NOT IN (SELECT node FROM nodes WHERE seen_at >= ?)",
    );
    this.#prune = db.prepare(`DELETE FROM jobs WHERE state != 'running' AND id NOT IN (SELECT id FROM jobs ORDER BY started_at DESC LIMIT ?)`);
    // Free, ours already, or its holder's heartbeat stopped: the upsert takes it; otherwise it stays.
    this.#acquire = db.prepare(
      'INSERT INTO job_leases (repo, node, at) VALUES (?, ?, ?) ON CONFLICT (repo) DO UPDATE SET node = excluded.node, at = excluded.at ' +
        'WHERE job_leases.node = excluded.node OR job_leases.node NOT IN (SELECT node FROM nodes WHERE seen_at >= ?) RETURNING node',
    );
    this.#release = db.prepare('DELETE FROM job_leases WHERE repo = ? AND node = ?');
  }

  async insert(id: string, kind: string, repo: string, dryRun: boolean, startedAt: number, node: string): Promise<void> {
    this.#insert.run(id, kind, repo, dryRun ? 1 : 0, startedAt, node);
    this.#prune.run(KEEP_JOBS);
  }

  async progress(id: string, p: JobProgress): Promise<void> {
    this.#progress.run(p.objectsDone, p.objectsTotal, p.bytesDone, p.bytesTotal, id);
  }

  async finish(id: string, state: 'done' | 'failed' | 'cancelled' | 'interrupted', report: unknown, error: string | null, p: JobProgress): Promise<void> {
    this.#finish.run(state, report === null ? null : JSON.stringify(report), error, Date.now(), p.objectsDone, p.objectsTotal, p.bytesDone, p.bytesTotal, id);
  }

  async get(id: string): Promise<JobRow | null> {
    const r = this.#get.get(id);
    return r === undefined ? null : toJob(r);
  }

  async recent(limit: number): Promise<JobRow[]> {
    return this.#recent.all(limit).map(toJob);
  }

  async recentOf(repo: string, limit: number): Promise<JobRow[]> {
    return this.#recentOf.all(repo, limit).map(toJob);
  }

  async markInterrupted(liveSince: number | null): Promise<number> {
    return (liveSince === null ? this.#interruptAll.run(Date.now()) : this.#interruptDead.run(Date.now(), liveSince)).changes;
  }

  async acquireLease(repo: string, node: string, liveSince: number): Promise<boolean> {
    return this.#acquire.get(repo, node, Date.now(), liveSince)?.node === node;
  }

  async releaseLease(repo: string, node: string): Promise<void> {
    this.#release.run(repo, node);
  }
}

/**
 * The index side of the maintenance jobs: references, quarantine marks, deletion intents, uploads in
 * flight. SQLite's one write lock (IMMEDIATE transactions) is the per-oid lock the upload/delete
 * handshake needs.
 */
export class MaintenanceRepo implements MaintenanceIndex {
  readonly #list: Statement<[string], { oid: string; size: number; stored_size: number; ref_at: number; obj_at: number; q: number }>;
  readonly #refsElsewhere: Statement<[string, string], { n: number }>;
  readonly #settle: (oid: Oid, liveSince: number) => 'stored' | 'in_flight' | 'delete';
  readonly #drop: (repo: string, oid: Oid, liveSince: number, node: string) => DropOutcome;
  readonly #quarantine: Statement<[string, string, string, number]>;
  readonly #pending: Statement<[number], { oid: string }>;
  readonly #isPending: Statement<[string], { n: number }>;
  readonly #donePending: Statement<[string]>;
  readonly #begin: (oid: Oid, node: string, now: number) => { ticket: number; deletePending: boolean; quarantined: boolean };
  readonly #end: Statement<[number]>;
  readonly #hint: QuarantineHint;

  constructor(db: Db, hint: QuarantineHint) {
    this.#hint = hint;
    this.#list = db.prepare(
      'SELECT r.oid, o.size, o.stored_size, r.created_at AS ref_at, o.created_at AS obj_at, (q.oid IS NOT NULL) AS q ' +
        'FROM repo_objects r JOIN objects o ON o.oid = r.oid LEFT JOIN quarantine q ON q.oid = r.oid WHERE r.repo = ? ORDER BY r.oid',
    );
    this.#refsElsewhere = db.prepare('SELECT COUNT(*) AS n FROM repo_objects WHERE oid = ? AND repo != ?');
    const hasObject = db.prepare<[string], { n: number }>('SELECT COUNT(*) AS n FROM objects WHERE oid = ?');
    const delRef = db.prepare<[string, string]>('DELETE FROM repo_objects WHERE repo = ? AND oid = ?');
    const refs = db.prepare<[string], { n: number }>('SELECT COUNT(*) AS n FROM repo_objects WHERE oid = ?');
    const delObject = db.prepare<[string]>('DELETE FROM objects WHERE oid = ?');
    const delMark = db.prepare<[string]>('DELETE FROM quarantine WHERE oid = ?');
    const intent = db.prepare<[string, number, string]>('INSERT OR REPLACE INTO pending_deletes (oid, at, node) VALUES (?, ?, ?)');
    const writing = db.prepare<[string, number], { n: number }>(
      'SELECT COUNT(*) AS n FROM uploads_in_flight u JOIN nodes n ON n.node = u.node WHERE u.oid = ? AND n.seen_at >= ?',
    );
    const drop = db.transaction((repo: string, oid: Oid, liveSince: number, node: string): DropOutcome => {
      delRef.run(repo, oid);
      if (refs.get(oid)!.n > 0) return 'kept';
      delObject.run(oid);
      if (delMark.run(oid).changes > 0) hint.changed();
      // An upload recorded in flight will record the object again once its bytes are in: keep them.
      if (writing.get(oid, liveSince)!.n > 0) return 'in_flight';
      intent.run(oid, Date.now(), node);
      return 'delete';
    });
    this.#drop = (repo, oid, liveSince, node) => drop.immediate(repo, oid, liveSince, node);
    const dropIntent = db.prepare<[string]>('DELETE FROM pending_deletes WHERE oid = ?');
    const settle = db.transaction((oid: Oid, liveSince: number): 'stored' | 'in_flight' | 'delete' => {
      if (hasObject.get(oid)!.n > 0) {
        dropIntent.run(oid);
        return 'stored';
      }
      return writing.get(oid, liveSince)!.n > 0 ? 'in_flight' : 'delete';
    });
    this.#settle = (oid, liveSince) => settle.immediate(oid, liveSince);
    this.#quarantine = db.prepare('INSERT OR IGNORE INTO quarantine (oid, repo, reason, at) VALUES (?, ?, ?, ?)');
    this.#pending = db.prepare('SELECT oid FROM pending_deletes WHERE node NOT IN (SELECT node FROM nodes WHERE seen_at >= ?)');
    this.#isPending = db.prepare('SELECT COUNT(*) AS n FROM pending_deletes WHERE oid = ?');
    this.#donePending = db.prepare('DELETE FROM pending_deletes WHERE oid = ?');
    const isQuarantined = db.prepare<[string], { n: number }>('SELECT COUNT(*) AS n FROM quarantine WHERE oid = ?');
    const record = db.prepare<[string, string, number]>('INSERT INTO uploads_in_flight (oid, node, at) VALUES (?, ?, ?)');
    const begin = db.transaction((oid: Oid, node: string, now: number) => {
      const ticket = Number(record.run(oid, node, now).lastInsertRowid);
      return { ticket, deletePending: this.#isPending.get(oid)!.n > 0, quarantined: isQuarantined.get(oid)!.n > 0 };
    });
    this.#begin = (oid, node, now) => begin.immediate(oid, node, now);
    this.#end = db.prepare('DELETE FROM uploads_in_flight WHERE ticket = ?');
  }

  async repoObjects(repo: string): Promise<RepoObjectRow[]> {
    return this.#list.all(repo).map((r) => ({
      oid: r.oid as Oid,
      size: r.size,
      storedSize: r.stored_size,
      referencedAt: r.ref_at,
      createdAt: r.obj_at,
      quarantined: r.q === 1,
    }));
  }

  async referencedElsewhere(oid: Oid, repo: string): Promise<boolean> {
    return this.#refsElsewhere.get(oid, repo)!.n > 0;
  }

  async settleIntent(oid: Oid, liveSince: number): Promise<'stored' | 'in_flight' | 'delete'> {
    return this.#settle(oid, liveSince);
  }

  async dropReference(repo: string, oid: Oid, liveSince: number, node: string): Promise<DropOutcome> {
    return this.#drop(repo, oid, liveSince, node);
  }

  async pendingDeletes(liveSince: number): Promise<Oid[]> {
    return this.#pending.all(liveSince).map((r) => r.oid as Oid);
  }

  async deleted(oid: Oid): Promise<void> {
    this.#donePending.run(oid);
  }

  async quarantine(oid: Oid, repo: string, reason: string): Promise<void> {
    this.#hint.changed();
    this.#quarantine.run(oid, repo, reason.slice(0, 500), Date.now());
  }

  async beginUpload(oid: Oid, node: string, now: number): Promise<{ ticket: number; deletePending: boolean; quarantined: boolean }> {
    return this.#begin(oid, node, now);
  }

  async deletePending(oid: Oid): Promise<boolean> {
    return this.#isPending.get(oid)!.n > 0;
  }

  async endUpload(ticket: number): Promise<void> {
    this.#end.run(ticket);
  }
}

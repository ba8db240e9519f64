import type { Statement } from 'better-sqlite3';
import type { Oid } from '../protocol/oid.js';
import type { Db } from './database.js';

/** One maintenance job as stored (issue 6). */
export interface JobRow {
  readonly id: string;
  readonly kind: string;
  readonly repo: string;
  readonly state: 'running' | 'done' | 'failed' | 'cancelled' | 'interrupted';
  readonly dryRun: boolean;
  readonly objectsDone: number;
  readonly objectsTotal: number | null;
  readonly bytesDone: number;
  readonly bytesTotal: number | null;
  /** The final report (JSON object) once done. */
  readonly report: unknown;
  readonly error: string | null;
  readonly startedAt: number;
  readonly finishedAt: number | null;
}

interface RawJob {
  id: string;
  kind: string;
  repo: string;
  state: string;
  dry_run: number;
  objects_done: number;
  objects_total: number | null;
  bytes_done: number;
  bytes_total: number | null;
  report: string | null;
  error: string | null;
  started_at: number;
  finished_at: number | null;
}

const toJob = (r: RawJob): JobRow => ({
  id: r.id,
  kind: r.kind,
  repo: r.repo,
  state: r.state as JobRow['state'],
  dryRun: r.dry_run === 1,
  objectsDone: r.objects_done,
  objectsTotal: r.objects_total,
  bytesDone: r.bytes_done,
  bytesTotal: r.bytes_total,
  report: r.report === null ? null : (JSON.parse(r.report) as unknown),
  error: r.error,
  startedAt: r.started_at,
  finishedAt: r.finished_at,
});

/** Jobs kept for the progress endpoint and the dashboard; older finished ones are pruned. */
const KEEP_JOBS = 500;

/** The jobs table: one row per job, progress written about once a second while it runs. */
export class JobsRepo {
  readonly #insert: Statement<[string, string, string, number, number]>;
  readonly #progress: Statement<[number, number | null, number, number | null, string]>;
  readonly #finish: Statement<[string, string | null, string | null, number, number, number | null, number, number | null, string]>;
  readonly #get: Statement<[string], RawJob>;
  readonly #recent: Statement<[number], RawJob>;
  readonly #recentOf: Statement<[string, number], RawJob>;
  readonly #interrupt: Statement<[number]>;
  readonly #prune: Statement<[number]>;

  constructor(db: Db) {
    this.#insert = db.prepare(
      "INSERT INTO jobs (id, kind, repo, state, dry_run, objects_done, bytes_done, started_at) VALUES (?, ?, ?, 'running', ?, 0, 0, ?)",
    );
    this.#progress = db.prepare('UPDATE jobs SET objects_done = ?, objects_total = ?, bytes_done = ?, bytes_total = ? WHERE id = ?');
    this.#finish = db.prepare(
      'UPDATE jobs SET state = ?, report = ?, error = ?, finished_at = ?, objects_done = ?, objects_total = ?, bytes_done = ?, bytes_total = ? WHERE id = ?',
    );
    this.#get = db.prepare('SELECT * FROM jobs WHERE id = ?');
    this.#recent = db.prepare('SELECT * FROM jobs ORDER BY started_at DESC LIMIT ?');
    // The table holds at most KEEP_JOBS rows, so a scan per call is cheap without an index on repo.
    this.#recentOf = db.prepare('SELECT * FROM jobs WHERE repo = ? ORDER BY started_at DESC LIMIT ?');
    this.#interrupt = db.prepare("UPDATE jobs SET state = 'interrupted', finished_at = ? WHERE state = 'running'");
    this.#prune = db.prepare(`DELETE FROM jobs WHERE state != 'running' AND id NOT IN (SELECT id FROM jobs ORDER BY started_at DESC LIMIT ?)`);
  }

  insert(id: string, kind: string, repo: string, dryRun: boolean, startedAt: number): void {
    this.#insert.run(id, kind, repo, dryRun ? 1 : 0, startedAt);
    this.#prune.run(KEEP_JOBS);
  }

  progress(id: string, p: { objectsDone: number; objectsTotal: number | null; bytesDone: number; bytesTotal: number | null }): void {
    this.#progress.run(p.objectsDone, p.objectsTotal, p.bytesDone, p.bytesTotal, id);
  }

  finish(
    id: string,
    state: 'done' | 'failed' | 'cancelled' | 'interrupted',
    report: unknown,
    error: string | null,
    p: { objectsDone: number; objectsTotal: number | null; bytesDone: number; bytesTotal: number | null },
  ): void {
    this.#finish.run(state, report === null ? null : JSON.stringify(report), error, Date.now(), p.objectsDone, p.objectsTotal, p.bytesDone, p.bytesTotal, id);
  }

  get(id: string): JobRow | null {
    const r = this.#get.get(id);
    return r === undefined ? null : toJob(r);
  }

  recent(limit: number): JobRow[] {
    return this.#recent.all(limit).map(toJob);
  }

  /** The most recent jobs of one repository ("org/repo"), newest first. */
  recentOf(repo: string, limit: number): JobRow[] {
    return this.#recentOf.all(repo, limit).map(toJob);
  }

  /** At start: jobs a previous process left running were cut short (crash, kill -9). */
  markInterrupted(): number {
    return this.#interrupt.run(Date.now()).changes;
  }
}

/** One reference of a repository with what retain, compress and audit need to know of it. */
export interface RepoObjectRow {
  readonly oid: Oid;
  readonly size: number;
  readonly storedSize: number;
  /** When this repository first referenced it. */
  readonly referencedAt: number;
  /** When the shared store first held it. */
  readonly createdAt: number;
  readonly quarantined: boolean;
}

/**
 * The index side of the maintenance jobs: a repository's references, dropping one (and the object
 * row when it was the last), quarantine marks and deletion intents. Every statement prepared once.
 */
export class MaintenanceRepo {
  readonly #list: Statement<[string], { oid: string; size: number; stored_size: number; ref_at: number; obj_at: number; q: number }>;
  readonly #refsElsewhere: Statement<[string, string], { n: number }>;
  readonly #hasObject: Statement<[string], { n: number }>;
  readonly #drop: (repo: string, oid: Oid) => boolean;
  readonly #quarantine: Statement<[string, string, string, number]>;
  readonly #storedSize: Statement<[number, string]>;
  readonly #pending: Statement<[], { oid: string }>;
  readonly #donePending: Statement<[string]>;

  constructor(db: Db) {
    this.#list = db.prepare(
      'SELECT r.oid, o.size, o.stored_size, r.created_at AS ref_at, o.created_at AS obj_at, (q.oid IS NOT NULL) AS q ' +
        'FROM repo_objects r JOIN objects o ON o.oid = r.oid LEFT JOIN quarantine q ON q.oid = r.oid WHERE r.repo = ? ORDER BY r.oid',
    );
    this.#refsElsewhere = db.prepare('SELECT COUNT(*) AS n FROM repo_objects WHERE oid = ? AND repo != ?');
    this.#hasObject = db.prepare('SELECT COUNT(*) AS n FROM objects WHERE oid = ?');
    const delRef = db.prepare<[string, string]>('DELETE FROM repo_objects WHERE repo = ? AND oid = ?');
    const refs = db.prepare<[string], { n: number }>('SELECT COUNT(*) AS n FROM repo_objects WHERE oid = ?');
    const delObject = db.prepare<[string]>('DELETE FROM objects WHERE oid = ?');
    const delMark = db.prepare<[string]>('DELETE FROM quarantine WHERE oid = ?');
    const intent = db.prepare<[string, number]>('INSERT OR REPLACE INTO pending_deletes (oid, at) VALUES (?, ?)');
    this.#drop = db.transaction((repo: string, oid: Oid): boolean => {
      delRef.run(repo, oid);
      if (refs.get(oid)!.n > 0) return false;
      delObject.run(oid);
      delMark.run(oid);
      intent.run(oid, Date.now());
      return true;
    });
    this.#quarantine = db.prepare('INSERT OR IGNORE INTO quarantine (oid, repo, reason, at) VALUES (?, ?, ?, ?)');
    this.#storedSize = db.prepare('UPDATE objects SET stored_size = ? WHERE oid = ?');
    this.#pending = db.prepare('SELECT oid FROM pending_deletes');
    this.#donePending = db.prepare('DELETE FROM pending_deletes WHERE oid = ?');
  }

  repoObjects(repo: string): RepoObjectRow[] {
    return this.#list.all(repo).map((r) => ({
      oid: r.oid as Oid,
      size: r.size,
      storedSize: r.stored_size,
      referencedAt: r.ref_at,
      createdAt: r.obj_at,
      quarantined: r.q === 1,
    }));
  }

  referencedElsewhere(oid: Oid, repo: string): boolean {
    return this.#refsElsewhere.get(oid, repo)!.n > 0;
  }

  hasObject(oid: Oid): boolean {
    return this.#hasObject.get(oid)!.n > 0;
  }

  /**
   * Drops the repository's reference; when no repository references the oid any more the object
   * row goes too and a deletion intent is recorded, all in one transaction. True when the caller
   * must now remove the file (then call deleted()).
   */
  dropReference(repo: string, oid: Oid): boolean {
    return this.#drop(repo, oid);
  }

  /** Deletion intents left by a crash between the index change and the file removal. */
  pendingDeletes(): Oid[] {
    return this.#pending.all().map((r) => r.oid as Oid);
  }

  deleted(oid: Oid): void {
    this.#donePending.run(oid);
  }

  quarantine(oid: Oid, repo: string, reason: string): void {
    this.#quarantine.run(oid, repo, reason.slice(0, 500), Date.now());
  }

  setStoredSize(oid: Oid, storedSize: number): void {
    this.#storedSize.run(storedSize, oid);
  }
}

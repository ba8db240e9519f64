import type { Statement } from 'better-sqlite3';
import type { Oid } from '../../protocol/oid.js';
import type { ResumableIndex, ResumableRow } from '../index-types.js';
import type { Db } from './database.js';

interface Row {
  repo: string;
  oid: string;
  size: number;
  part_size: number;
  received: number;
  states: Buffer;
  holder: string | null;
  touched_at: number;
}

const COLUMNS = 'repo, oid, size, part_size, received, states, holder, touched_at';
/** A holder that is this node, or no live node. */
const CLAIMABLE = '(holder IS NULL OR holder = @node OR holder NOT IN (SELECT node FROM nodes WHERE seen_at >= @liveSince))';

function toRow(r: Row): ResumableRow {
  return { repo: r.repo, oid: r.oid as Oid, size: r.size, partSize: r.part_size, received: r.received, states: new Uint8Array(r.states), holder: r.holder, touchedAt: r.touched_at };
}

/** Partial resumable uploads in SQLite (see ResumableIndex). */
export class ResumableRepo implements ResumableIndex {
  readonly #announce: Statement<[string, string, number, number, number]>;
  readonly #get: Statement<[string, string], Row>;
  readonly #claim: Statement<{ repo: string; oid: string; node: string; liveSince: number; now: number }>;
  readonly #advance: Statement<[number, Buffer, number, string, string, string]>;
  readonly #release: Statement<[string, string, string]>;
  readonly #remove: Statement<[string, string]>;
  readonly #list: Statement<{ repo: string | null; before: number | null; liveSince: number; node: string }, Row>;
  readonly #figures: Statement<[], { count: number; bytes: number }>;

  constructor(db: Db) {
    this.#announce = db.prepare(
      'INSERT INTO resumable_uploads (repo, oid, size, part_size, touched_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (repo, oid) DO UPDATE SET touched_at = excluded.touched_at',
    );
    this.#get = db.prepare(`SELECT ${COLUMNS} FROM resumable_uploads WHERE repo = ? AND oid = ?`);
    this.#claim = db.prepare(`UPDATE resumable_uploads SET holder = @node, touched_at = @now WHERE repo = @repo AND oid = @oid AND ${CLAIMABLE}`);
    this.#advance = db.prepare('UPDATE resumable_uploads SET received = ?, states = ?, touched_at = ? WHERE repo = ? AND oid = ? AND holder = ?');
    this.#release = db.prepare('UPDATE resumable_uploads SET holder = NULL WHERE repo = ? AND oid = ? AND holder = ?');
    this.#remove = db.prepare('DELETE FROM resumable_uploads WHERE repo = ? AND oid = ?');
    this.#list = db.prepare(
      `SELECT ${COLUMNS} FROM resumable_uploads WHERE (@repo IS NULL OR repo = @repo) AND (@before IS NULL OR (touched_at < @before AND ${CLAIMABLE})) ORDER BY repo, oid`,
    );
    this.#figures = db.prepare('SELECT count(*) AS count, COALESCE(sum(received), 0) AS bytes FROM resumable_uploads');
  }

  async announce(repo: string, oid: Oid, size: number, partSize: number, now: number): Promise<void> {
    this.#announce.run(repo, oid, size, partSize, now);
  }

  async get(repo: string, oid: Oid): Promise<ResumableRow | null> {
    const r = this.#get.get(repo, oid);
    return r === undefined ? null : toRow(r);
  }

  async claim(repo: string, oid: Oid, node: string, liveSince: number, now: number): Promise<boolean> {
    return this.#claim.run({ repo, oid, node, liveSince, now }).changes === 1;
  }

  async advance(repo: string, oid: Oid, node: string, received: number, states: Uint8Array, now: number): Promise<boolean> {
    return this.#advance.run(received, Buffer.from(states), now, repo, oid, node).changes === 1;
  }

  async release(repo: string, oid: Oid, node: string): Promise<void> {
    this.#release.run(repo, oid, node);
  }

  async remove(repo: string, oid: Oid): Promise<void> {
    this.#remove.run(repo, oid);
  }

  async list(repo: string | null, idleBefore: number | null, liveSince: number): Promise<ResumableRow[]> {
    // `node` matches no holder: a row held by any live node is not idle.
    return this.#list.all({ repo, before: idleBefore, liveSince, node: '' }).map(toRow);
  }

  async figures(): Promise<{ count: number; bytes: number }> {
    return this.#figures.get()!;
  }
}

import type { Oid } from '../protocol/oid.js';

/**
 * Everything Stowage knows besides the bytes. SQLite (one node) and PostgreSQL (a cluster) pass
 * test/conformance/index.suite.ts. Every rule that must hold across nodes (one lock per path, one
 * running job per repository, no delete of an oid being uploaded) is decided by the database.
 */
export interface Index {
  readonly kind: 'sqlite' | 'postgres';
  readonly objects: ObjectIndex;
  readonly locks: LockIndex;
  readonly sessions: SessionIndex;
  readonly settings: SettingsIndex;
  readonly jobs: JobIndex;
  readonly maintenance: MaintenanceIndex;
  readonly stats: StatsIndex;
  readonly nodes: NodeIndex;
  readonly resumable: ResumableIndex;
  readonly dataKeys: DataKeyIndex;
  /** Answers when the database is reachable and migrated; throws (a storage fault) otherwise. */
  ping(): Promise<void>;
  /** Makes what is committed durable on its own (SQLite: a WAL checkpoint; PostgreSQL: nothing to do). */
  checkpoint(): Promise<void>;
  close(): Promise<void>;
}

export interface ObjectRow {
  readonly oid: Oid;
  readonly size: number;
  readonly storedSize: number;
}

/** What an upload's reference statement settles besides the reference (docs/cluster.md "Uploads and retain"). */
export interface UploadCommit {
  /** False: the store kept an unverified copy, so a quarantined oid is refused rather than healed. */
  readonly storedVerified: boolean;
  /** The upload's in-flight row (beginUpload), ended in the same transaction; null when none was recorded. */
  readonly ticket: number | null;
  /** The newest sweep this node acknowledged: refused (SweepMissed) when a later one has started deleting. */
  readonly ackedSweep: number;
  /** The saved setting the upload was judged by: refused (SettingsChanged) unless it is still saved so; null: no check. */
  readonly setting: SettingGuard | null;
}

/** A saved setting as a request read it: `value` its JSON text, null when none was saved. */
export interface SettingGuard {
  readonly key: string;
  readonly value: string | null;
}

/** The reference was not recorded: the setting the upload was judged by has been saved anew since (judge it again). */
export class SettingsChanged extends Error {
  constructor() {
    super('the access settings changed since the upload was admitted');
    this.name = 'SettingsChanged';
  }
}

/** The ackedSweep of a process that takes part in no sweeps (one node on SQLite): no sweep is ever later. */
export const NO_SWEEPS = Number.MAX_SAFE_INTEGER;

/** The reference was not recorded: a retain sweep this node did not acknowledge may have deleted the bytes (the node was taken for dead). */
export class SweepMissed extends Error {
  constructor() {
    super('a retain sweep this node did not acknowledge has started deleting');
    this.name = 'SweepMissed';
  }
}

/** The reference was not recorded: the oid is quarantined and the store's copy is the one the audit found bad. */
export class QuarantinedCopy extends Error {
  constructor(readonly oid: Oid) {
    super(`the stored copy of ${oid} is quarantined`);
    this.name = 'QuarantinedCopy';
  }
}

/** Objects and per-repository references (proof of possession: a repository sees only what it uploaded). */
export interface ObjectIndex {
  /** The object as this repository sees it: only when the repository holds a reference and it is not quarantined. */
  findInRepo(repo: string, oid: Oid): Promise<ObjectRow | null>;
  /** findInRepo for many oids at once (a batch request): one query; the map holds those found. */
  findManyInRepo(repo: string, oids: readonly Oid[]): Promise<Map<Oid, ObjectRow>>;
  /** The object in the shared store, whoever uploaded it. Never let its answer reach a client. */
  findShared(oid: Oid): Promise<ObjectRow | null>;
  /** An empty index beside a full store means a lost index. */
  hasAny(): Promise<boolean>;
  /** True when an audit found the stored bytes bad and no good copy has arrived since. */
  isQuarantined(oid: Oid): Promise<boolean>;
  /** Lifts a quarantine (the caller verified the bytes). Group-committed; one row's failure never fails the others. */
  addReference(repo: string, oid: Oid, size: number, storedSize: number, commit?: UploadCommit): Promise<void>;
  /** Journal replay: puts back a reference the index may have lost; never lifts a quarantine. */
  restoreReference(repo: string, oid: Oid, size: number, storedSize: number): Promise<void>;
  /** The object's bytes now take `storedSize` in the store (written out of the journal, re-encoded). */
  setStoredSize(oid: Oid, storedSize: number): Promise<void>;
}

export interface LockRow {
  /** Monotonic position (never reused): the paging key. */
  readonly seq: number;
  readonly id: string;
  readonly repo: string;
  readonly path: string;
  readonly ref: string | null;
  readonly ownerId: string;
  readonly ownerName: string;
  readonly lockedAt: number;
}

export type NewLock = Omit<LockRow, 'seq'>;

/** Outcome of `create`: the new lock, the lock that is in the way, or a stale lock replaced. */
export type CreateOutcome =
  | { readonly kind: 'created'; readonly lock: LockRow }
  | { readonly kind: 'conflict'; readonly existing: LockRow }
  | { readonly kind: 'taken_over'; readonly lock: LockRow; readonly previous: LockRow };

/** Locks per repository. Every lookup by id also names the repository. */
export interface LockIndex {
  /**
   * Of racing creates on any node exactly one wins (unique (repo, path) index). A held lock older
   * than `staleBefore` (null: never stale) is replaced in the same transaction.
   */
  create(lock: NewLock, staleBefore: number | null): Promise<CreateOutcome>;
  findById(repo: string, id: string): Promise<LockRow | null>;
  findByPath(repo: string, path: string): Promise<LockRow | null>;
  page(repo: string, after: number, limit: number): Promise<LockRow[]>;
  delete(repo: string, id: string): Promise<boolean>;
  count(repo: string): Promise<number>;
}

/** A dashboard session as stored: keyed by the sha256 of the cookie value, never the value itself. */
export interface SessionRow {
  readonly idHash: string;
  readonly userId: string;
  readonly userName: string;
  /** How the forge made this person an admin: 'site_admin' or 'admin_repo'. */
  readonly via: string;
  readonly createdAt: number;
  readonly expiresAt: number;
}

/** Dashboard sign-in sessions (shared by every node: a cookie from one works on all). */
export interface SessionIndex {
  insert(row: SessionRow): Promise<void>;
  /** The live session with this hash, or null when unknown or expired at `now`. */
  find(idHash: string, now: number): Promise<SessionRow | null>;
  delete(idHash: string): Promise<boolean>;
  purgeExpired(now: number): Promise<number>;
}

export interface SettingRow {
  readonly value: unknown;
  readonly updatedAt: number;
  readonly updatedBy: string;
}

export interface SettingsIndex {
  get(key: string): Promise<SettingRow | null>;
  put(key: string, value: unknown, updatedBy: string, now: number): Promise<void>;
  /** Saves `value` unless the key holds one already; returns what the key holds after (of racing callers, all get the first one's). */
  putIfAbsent(key: string, value: unknown, updatedBy: string, now: number): Promise<SettingRow>;
  delete(key: string): Promise<void>;
}

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
  readonly node: string;
}

export interface JobProgress {
  readonly objectsDone: number;
  readonly objectsTotal: number | null;
  readonly bytesDone: number;
  readonly bytesTotal: number | null;
}

/**
 * The jobs table and the per-repository job lease: only the lease's node works on a repository's
 * references. A node whose heartbeat stopped loses its leases; its running jobs become `interrupted`.
 */
export interface JobIndex {
  /** Records a job `running` on `node`; prunes old finished rows. */
  insert(id: string, kind: string, repo: string, dryRun: boolean, startedAt: number, node: string): Promise<void>;
  progress(id: string, p: JobProgress): Promise<void>;
  finish(id: string, state: 'done' | 'failed' | 'cancelled' | 'interrupted', report: unknown, error: string | null, p: JobProgress): Promise<void>;
  get(id: string): Promise<JobRow | null>;
  recent(limit: number): Promise<JobRow[]>;
  recentOf(repo: string, limit: number): Promise<JobRow[]>;
  /** `liveSince` null: every running job (one node, at start); else those of dead nodes. */
  markInterrupted(liveSince: number | null): Promise<number>;
  /** Free, already this node's, or held by a dead node: true when this node now holds it. */
  acquireLease(repo: string, node: string, liveSince: number): Promise<boolean>;
  /** Gives the lease back (only when `node` holds it). */
  releaseLease(repo: string, node: string): Promise<void>;
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

/** What dropping a reference decided (see MaintenanceIndex.dropReference). */
export type DropOutcome =
  /** Another repository still references the oid: only this repository's reference went. */
  | 'kept'
  /** The last reference and the object row went, and a deletion intent is recorded: delete the bytes, then call deleted(). */
  | 'delete'
  /** The last reference went, but a write of the oid is in flight on some live node: the bytes stay (that upload records them again). */
  | 'in_flight';

/**
 * The index side of the maintenance jobs. An upload records itself in flight (beginUpload) before it
 * writes, retain a deletion intent before it deletes; each checks for the other after its own
 * record, under one per-oid lock, so at least one sees the other.
 */
export interface MaintenanceIndex {
  repoObjects(repo: string): Promise<RepoObjectRow[]>;
  referencedElsewhere(oid: Oid, repo: string): Promise<boolean>;
  /** One transaction: the last reference takes the object row and records an intent unless a live write is in flight. */
  dropReference(repo: string, oid: Oid, liveSince: number, node: string): Promise<DropOutcome>;
  /**
   * Deletion intents left by a crash between the index change and the bytes' removal: those whose
   * node's heartbeat is before `liveSince` or absent (a live node may still be deleting its own).
   */
  pendingDeletes(liveSince: number): Promise<Oid[]>;
  /** Under the oid's lock: 'stored' (recorded again; intent dropped), 'in_flight' (later run), else 'delete'. */
  settleIntent(oid: Oid, liveSince: number): Promise<'stored' | 'in_flight' | 'delete'>;
  /** The bytes of an intent are gone (or the intent is dropped): removes it. */
  deleted(oid: Oid): Promise<void>;
  quarantine(oid: Oid, repo: string, reason: string): Promise<void>;
  /** Records a write in flight; with a deletion pending the caller waits for deletePending() false. */
  beginUpload(oid: Oid, node: string, now: number): Promise<{ readonly ticket: number; readonly deletePending: boolean; readonly quarantined: boolean }>;
  deletePending(oid: Oid): Promise<boolean>;
  /** The write of a ticket is finished (reference recorded) or abandoned. */
  endUpload(ticket: number): Promise<void>;
}

/** Server-wide figures and the per-repository ones the pages and quotas read. */
export interface RepoSummary {
  readonly objects: number;
  /** Bytes as uploaded (sum of object sizes). */
  readonly logicalBytes: number;
  /** Bytes its objects occupy in the store after compression, each counted in full even when shared. */
  readonly storedBytes: number;
}

export interface LargestObject {
  readonly oid: string;
  readonly size: number;
  readonly storedSize: number;
  /** When this repository first held it (ms since epoch). */
  readonly createdAt: number;
}

export interface HistogramBucket {
  /** Inclusive lower bound in bytes. */
  readonly min: number;
  /** Exclusive upper bound in bytes; null for the last, open bucket. */
  readonly max: number | null;
  readonly count: number;
  readonly bytes: number;
}

export interface LockListRow {
  readonly id: string;
  readonly path: string;
  readonly ownerName: string;
  readonly lockedAt: number;
}

/** Result of the last audit of a repository; written by the audit job, read by the page. */
export interface AuditRow {
  readonly finishedAt: number;
  readonly objects: number;
  readonly bytes: number;
  readonly corrupt: number;
  readonly unreadable: number;
  readonly complete: boolean;
}

export interface RepoListRow {
  readonly repo: string;
  readonly objects: number;
  readonly logicalBytes: number;
  /** The last audit: null when never audited; ok when complete with nothing corrupt or unreadable. */
  readonly audit: { readonly finishedAt: number; readonly ok: boolean } | null;
}

/** Server-wide totals (dashboard only: these do show what dedupe saves across repositories). */
export interface ServerTotals {
  readonly repositories: number;
  /** Distinct oids in the shared store. */
  readonly objects: number;
  /** Every repository's reference counted. */
  readonly references: number;
  readonly logicalBytes: number;
  /** Each oid once, before compression. */
  readonly uniqueBytes: number;
  /** Each oid once, in the store. */
  readonly storedBytes: number;
}

/** One point of the time series behind the dashboard plots; transfer figures are deltas since the previous point. */
export interface StatsSample {
  readonly at: number;
  readonly repositories: number;
  readonly objects: number;
  readonly logicalBytes: number;
  readonly storedBytes: number;
  readonly uploads: number;
  readonly uploadBytes: number;
  readonly downloads: number;
  readonly downloadBytes: number;
  readonly rejections: Readonly<Record<string, number>>;
}

/** Powers of four from 1 KiB to 4 GiB: icons and video masters both spread over several bars. */
export const HISTOGRAM_BOUNDS: readonly number[] = Array.from({ length: 12 }, (_, i) => 1024 * 4 ** i);

/** Read-mostly figures over objects, references, locks and audits, plus the stats time series. */
export interface StatsIndex {
  repoSummary(repo: string): Promise<RepoSummary>;
  largestObjects(repo: string, limit: number): Promise<LargestObject[]>;
  /** Every bucket of HISTOGRAM_BOUNDS, empty ones included. */
  sizeHistogram(repo: string): Promise<HistogramBucket[]>;
  locks(repo: string, limit: number): Promise<{ total: number; items: LockListRow[] }>;
  lockTotal(): Promise<number>;
  lastAudit(repo: string): Promise<AuditRow | null>;
  recordAudit(repo: string, a: AuditRow): Promise<void>;
  auditTotals(): Promise<{ clean: number; problemsFound: number; incomplete: number; lastSuccessAt: number | null }>;
  quarantinedTotal(): Promise<number>;
  repositoryList(limit: number): Promise<RepoListRow[]>;
  serverTotals(): Promise<ServerTotals>;
  /**
   * Adds one node's sample: totals replace, transfer deltas and rejections add up, so samples of
   * several nodes at the same instant sum to the cluster's figures.
   */
  insertSample(s: StatsSample): Promise<void>;
  samplesSince(at: number): Promise<StatsSample[]>;
  lastSample(): Promise<StatsSample | null>;
  pruneSamples(before: number): Promise<void>;
}

/** The retain sweeps as a heartbeat finds them. */
export interface SweepState {
  /** The newest sweep ever opened; 0 when none. */
  readonly latest: number;
  /** A sweep of a live node is open: while one is, every upload is recorded in flight (beginUpload). */
  readonly open: boolean;
}

/** A partial resumable upload shared by the nodes of a cluster (docs/resumable-uploads.md, "On several nodes"). */
export interface ResumableRow {
  readonly repo: string;
  readonly oid: Oid;
  readonly size: number;
  /** Bytes in one part; every durable point is a whole number of parts. */
  readonly partSize: number;
  /** Durable bytes: whole parts in the bucket. */
  readonly received: number;
  /** The saved sha256 state after each whole part, in order (40 bytes each: a part ends on a 64-byte block). */
  readonly states: Uint8Array;
  readonly holder: string | null;
  /** When it was announced or last took bytes (ms): the TTL sweep's clock. */
  readonly touchedAt: number;
}

/**
 * Partial resumable uploads, so any node continues the same upload (bytes are parts in the bucket).
 * A node appends only while it holds the row; a holder not live since `liveSince` holds nothing.
 */
export interface ResumableIndex {
  /** A batch offered the upload: the row is made (offset 0) or, if there, touched. */
  announce(repo: string, oid: Oid, size: number, partSize: number, now: number): Promise<void>;
  get(repo: string, oid: Oid): Promise<ResumableRow | null>;
  /** Takes the row for `node` unless a live other node holds it; false then, or when there is no row. */
  claim(repo: string, oid: Oid, node: string, liveSince: number, now: number): Promise<boolean>;
  /** Moves the durable offset to `received` with its `states`, while `node` holds the row; false when it does not. */
  advance(repo: string, oid: Oid, node: string, received: number, states: Uint8Array, now: number): Promise<boolean>;
  release(repo: string, oid: Oid, node: string): Promise<void>;
  remove(repo: string, oid: Oid): Promise<void>;
  /** Rows of `repo` (retain, and its quota), or of every repository when null, untouched since `before` and held by no live node when given. */
  list(repo: string | null, idleBefore: number | null, liveSince: number): Promise<ResumableRow[]>;
  /** Rows and their durable bytes (metrics). */
  figures(): Promise<{ count: number; bytes: number }>;
}

/**
 * Node liveness (a node silent for NODE_STALE_MS is dead), and retain's sweeps: retain deletes
 * nothing until every live node acknowledged its sweep; a node acknowledges only after recording
 * its uploads in flight, and records every upload while a sweep is open; a reference is refused
 * when a sweep the node missed has started deleting. Without a sweep an upload is one statement.
 */
export interface NodeIndex {
  /** Writes the node's heartbeat and the newest sweep it acknowledged; nodes live since `liveSince` keep a sweep open. */
  heartbeat(node: string, now: number, ackedSweep: number, liveSince: number): Promise<SweepState>;
  /** Opens a sweep for `node`'s retain; returns its number (greater than every earlier one). */
  openSweep(node: string, now: number): Promise<number>;
  /** Live nodes that have not acknowledged `sweep`; none: the sweep is marked deleting in the same statement. */
  startDeleting(sweep: number, liveSince: number): Promise<string[]>;
  /** The sweep is over: uploads stop recording themselves once no other is open. */
  closeSweep(sweep: number, now: number): Promise<void>;
  /** Forgets nodes silent since `before` (every start is a new node) and their uploads in flight. */
  forget(before: number): Promise<number>;
}

export const NODE_HEARTBEAT_MS = 5_000;
/** A node silent this long is taken for dead. */
export const NODE_STALE_MS = 30_000;

/** One object copy's data key, as the index keeps it: wrapped by a key-encryption key, never raw. */
export interface DataKeyRow {
  /** 32 hex digits, random; written in the header of the object copy it encrypts. */
  readonly dataKeyId: string;
  /** The id of the key-encryption key (src/crypto/key-ring.ts) that wrapped it. */
  readonly kekId: string;
  readonly wrapped: Buffer;
}

/** Wrapped data keys of encrypted copies (docs/encryption.md); a key may leave the key file once kekIdsInUse omits it. */
export interface DataKeyIndex {
  /**
   * Records a new data key, written at `createdAt` (ms; now unless told); a dataKeyId already
   * recorded is an error (ids are random, 128 bits).
   */
  putDataKey(row: DataKeyRow, createdAt?: number): Promise<void>;
  getDataKey(dataKeyId: string): Promise<DataKeyRow | null>;
  /** Rows not wrapped under kekId, ordered by dataKeyId, after `after` (exclusive), at most limit. */
  dataKeysNotWrappedWith(kekId: string, after: string | null, limit: number): Promise<DataKeyRow[]>;
  /** Compare-and-set: replaces the wrap only if the row is still under fromKekId; true when it did. */
  rewrapDataKey(dataKeyId: string, fromKekId: string, toKekId: string, wrapped: Buffer): Promise<boolean>;
  kekIdsInUse(): Promise<string[]>;
  deleteDataKey(dataKeyId: string): Promise<void>;
  /** Ids of rows written before `before` (ms), ordered by dataKeyId, after `after` (exclusive), at most limit. */
  dataKeyIdsWrittenBefore(before: number, after: string | null, limit: number): Promise<string[]>;
  /** Deletes those of `dataKeyIds` written before `before` (a row written since is kept); returns how many went. */
  deleteDataKeysWrittenBefore(dataKeyIds: readonly string[], before: number): Promise<number>;
}

import { setTimeout as sleep } from 'node:timers/promises';
import type { ObjectIndex, ResumableIndex, ResumableRow } from '../db/index-types.js';
import { lfsError } from '../errors/errors.js';
import type { ResumableHasher, ResumableStreamHasher } from '../format/frame-codec.js';
import type { Oid } from '../protocol/oid.js';
import type { RepoName } from '../protocol/repo-name.js';
import type { ObjectWriter, PartStore, PutResult } from '../store/types.js';
import type { UploadJudge } from './access-service.js';
import { EMPTY_STATE, drain, stemOf, tusConflict, type TusUploads } from './resumable-uploads.js';
import type { UploadLimits } from './settings-service.js';
import type { TransferService, UploadBody } from './transfer-service.js';

/**
 * Bytes per part: each whole part is a durable point. A multiple of 64, so a part ends a sha256
 * block and the hash state after it is 40 bytes; what a node killed mid-PATCH loses is at most the
 * part it was filling and the one it was sending.
 */
export const PART_SIZE = 4 << 20;
const STATE_BYTES = 40;
/** How long a PATCH waits for another node to let go of the upload (its client gave up on it) before 423. */
const LEASE_WAIT_MS = 3_000;
const LEASE_POLL_MS = 100;

/** This process among the nodes sharing the index (ClusterNode, or one node on its own). */
export interface NodeLiveness {
  readonly id: string;
  /** Holders whose node has not beaten since this instant hold nothing. */
  liveSince(): number;
}

export interface SharedResumableParts {
  readonly index: ResumableIndex;
  readonly objects: ObjectIndex;
  readonly transfers: TransferService;
  readonly hasher: ResumableHasher;
  readonly parts: PartStore;
  readonly node: NodeLiveness;
  readonly limits?: UploadLimits | null;
  /** SVC_UPLOAD_RESUME_TTL in seconds. */
  readonly ttlSeconds: number;
  readonly log: (msg: string, fields: object) => void;
}

const busy = (): Error => lfsError('LFS_ERR_UPLOAD_BUSY', undefined, { 'Retry-After': '2' });

/**
 * Partial uploads of the tus transfer shared by every node (docs/resumable-uploads.md, "On several
 * nodes"): the state in the index (ResumableIndex: announced size, durable offset, the sha256 state
 * after each whole part, the node appending), the bytes as parts in the bucket (PartStore). A node
 * appends only while it holds the row, and lets go when its PATCH ends; a dead node's hold lapses
 * with its heartbeat. A PATCH may start at the durable offset or at any whole part before it (a
 * client that asked while another node was still finishing a part), since the state after each
 * part is kept. The finished upload is read back from its parts into the store as a PUT, with the
 * digest the hash state gave.
 */
export class SharedResumableUploads implements TusUploads {
  readonly #p: SharedResumableParts;
  readonly #ttlMs: number;
  /** Uploads a PATCH of this process appends to: the index's hold is per node, this is per request. */
  readonly #appending = new Set<string>();

  constructor(parts: SharedResumableParts) {
    this.#p = parts;
    this.#ttlMs = parts.ttlSeconds * 1000;
  }

  async announce(repo: RepoName, oid: Oid, size: number): Promise<void> {
    await this.#p.index.announce(repo.key, oid, size, PART_SIZE, Date.now());
  }

  figures(): Promise<{ count: number; bytes: number }> {
    return this.#p.index.figures();
  }

  async bytesOf(repoKey: string, except: Oid): Promise<number> {
    let bytes = 0;
    for (const r of await this.#p.index.list(repoKey, null, this.#p.node.liveSince())) if (r.oid !== except) bytes += r.received;
    return bytes;
  }

  async status(repo: RepoName, oid: Oid): Promise<{ offset: number; size: number } | null> {
    let row = await this.#p.index.get(repo.key, oid);
    // A client asks where its upload stands when it starts (again): a PATCH still running is one it
    // gave up on, whose node may not have seen the connection drop yet. Once that node lets go it has
    // recorded every part it was sending, so the answer waits for that (a while), as on one node.
    const until = Date.now() + LEASE_WAIT_MS;
    while (row !== null && row.holder !== null && Date.now() < until && (await this.#heldElsewhere(row))) {
      await sleep(LEASE_POLL_MS);
      row = await this.#p.index.get(repo.key, oid);
    }
    // Whole parts only: a node appending now may be sending the next one; it is not promised yet.
    if (row !== null) return { offset: row.received, size: row.size };
    const stored = (await this.#p.objects.findManyInRepo(repo.key, [oid])).get(oid);
    return stored === undefined ? null : { offset: stored.size, size: stored.size };
  }

  async patch(repo: RepoName, oid: Oid, offset: number, body: UploadBody, judge: UploadJudge | null): Promise<number> {
    const { index, node } = this.#p;
    const first = await index.get(repo.key, oid);
    if (first === null) {
      const done = await this.status(repo, oid);
      if (done === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND', 'No upload of this object was offered to this repository: ask the batch first');
      if (offset !== done.offset) throw tusConflict(done.offset);
      await drain(body);
      return done.offset;
    }
    checkOffset(first, offset);
    const mine = stemOf(repo.key, oid);
    await this.#claim(repo.key, oid, mine);
    this.#appending.add(mine);
    try {
      const row = await index.get(repo.key, oid);
      if (row === null) throw lfsError('LFS_ERR_OBJECT_NOT_FOUND', 'The upload was removed meanwhile: ask the batch again');
      checkOffset(row, offset);
      if (row.received === 0) await this.#p.limits?.admitPut(repo, oid, row.size);
      this.#p.transfers.admitBytes(row.size - offset);
      const whole = offset / row.partSize;
      const states = row.states.subarray(0, whole * STATE_BYTES);
      const from = whole === 0 ? EMPTY_STATE : states.subarray((whole - 1) * STATE_BYTES);
      const run = new PartRun(row, whole, this.#p.hasher.openResumable(from), states, this.#p.parts, stemOf(repo.key, oid), async (received, all) => {
        if (!(await index.advance(repo.key, oid, node.id, received, all, Date.now()))) throw busy();
      });
      let failure: unknown = null;
      try {
        await body.into(run);
      } catch (e) {
        failure = e;
      }
      const durable = await run.settle(failure !== null);
      if (failure !== null) throw failure;
      if (run.complete) {
        await this.#finish(repo, oid, row, run, judge);
        return row.size;
      }
      return durable;
    } finally {
      this.#appending.delete(mine);
      await index.release(repo.key, oid, node.id).catch((e: unknown) => this.#p.log('a partial upload was not let go in the index; it lapses with this node', { level: 'warn', oid, err: String(e) }));
    }
  }

  /** Whether a request (here or on a live node) appends to the row now. */
  async #heldElsewhere(row: ResumableRow): Promise<boolean> {
    if (this.#appending.has(stemOf(row.repo, row.oid))) return true;
    // Claimed and let go at once when no live request holds it: a claim is the liveness check.
    const { index, node } = this.#p;
    if (row.holder === node.id) return false;
    if (!(await index.claim(row.repo, row.oid, node.id, node.liveSince(), Date.now()))) return true;
    await index.release(row.repo, row.oid, node.id);
    return false;
  }

  /** Takes the upload for this node, waiting a while for another node to let go of it. */
  async #claim(repoKey: string, oid: Oid, name: string): Promise<void> {
    const { index, node } = this.#p;
    const until = Date.now() + LEASE_WAIT_MS;
    while (this.#appending.has(name) || !(await index.claim(repoKey, oid, node.id, node.liveSince(), Date.now()))) {
      if (Date.now() > until || (await index.get(repoKey, oid)) === null) throw busy();
      await sleep(LEASE_POLL_MS);
    }
  }

  /** Every byte is in the bucket: the digest from the hash state must be the oid; then into the store as a PUT, and the parts go. */
  async #finish(repo: RepoName, oid: Oid, row: ResumableRow, run: PartRun, judge: UploadJudge | null): Promise<void> {
    const sha256 = await run.digest();
    const name = stemOf(repo.key, oid);
    if (sha256 !== oid) {
      await this.#remove(repo.key, oid);
      throw lfsError('LFS_ERR_DIGEST_MISMATCH', `Content hashes to ${sha256}, not to the oid ${oid}`);
    }
    await this.#p.transfers.upload(repo, oid, partsBody(this.#p.parts, name, Math.ceil(row.size / row.partSize), sha256), row.size, judge);
    await this.#remove(repo.key, oid);
  }

  async #remove(repoKey: string, oid: Oid): Promise<void> {
    // The row last: parts without it would be litter no sweep finds.
    await this.#p.parts.removeAll(stemOf(repoKey, oid));
    await this.#p.index.remove(repoKey, oid);
  }

  async terminate(repo: RepoName, oid: Oid): Promise<boolean> {
    const { index, node } = this.#p;
    if ((await index.get(repo.key, oid)) === null) return false;
    if (!(await index.claim(repo.key, oid, node.id, node.liveSince(), Date.now()))) throw busy();
    await this.#remove(repo.key, oid);
    return true;
  }

  async sweep(now = Date.now()): Promise<number> {
    const stale = await this.#p.index.list(null, now - this.#ttlMs, this.#p.node.liveSince());
    for (const r of stale) await this.#remove(r.repo, r.oid);
    if (stale.length > 0) this.#p.log('partial uploads past SVC_UPLOAD_RESUME_TTL removed', { removed: stale.length });
    return stale.length;
  }

  async dropUnkept(repoKey: string, keep: ReadonlySet<Oid>, before: number, dryRun: boolean): Promise<number> {
    const gone = (await this.#p.index.list(repoKey, before, this.#p.node.liveSince())).filter((r) => !keep.has(r.oid));
    if (!dryRun) for (const r of gone) await this.#remove(r.repo, r.oid);
    return gone.length;
  }
}

/** tus: the offset must be the durable one; here also any whole part before it (its hash state is kept). */
function checkOffset(row: ResumableRow, offset: number): void {
  if (offset > row.received || (offset !== row.received && offset % row.partSize !== 0)) throw tusConflict(row.received);
}

/**
 * One PATCH's bytes into parts: gathered into a part buffer, hashed in order, sent to the bucket one
 * part at a time (the next one filling meanwhile; the socket waits past that), and each whole part
 * recorded with the hash state after it once the bucket has it. The last part, short, is sent but
 * not recorded: the finish follows at once. A body that ends early loses the part it was filling.
 */
class PartRun implements ObjectWriter {
  readonly #size: number;
  readonly #partSize: number;
  readonly #hash: ResumableStreamHasher;
  readonly #parts: PartStore;
  readonly #name: string;
  readonly #record: (received: number, states: Uint8Array) => Promise<void>;
  #states: Uint8Array;
  #part: number;
  #buf: Buffer;
  #fill = 0;
  #durable: number;
  /** The parts sent one after another; rejects with the first failure. */
  #chain: Promise<void> = Promise.resolve();
  #pending = 0;
  #failed: unknown = null;
  #owed = false;
  #drain: (() => void) | null = null;
  #lastSent = false;

  constructor(row: ResumableRow, whole: number, hash: ResumableStreamHasher, states: Uint8Array, parts: PartStore, name: string, record: (received: number, states: Uint8Array) => Promise<void>) {
    this.#size = row.size;
    this.#partSize = row.partSize;
    this.#hash = hash;
    this.#states = states;
    this.#parts = parts;
    this.#name = name;
    this.#record = record;
    this.#part = whole;
    this.#durable = whole * row.partSize;
    this.#buf = Buffer.allocUnsafe(this.#lengthOf(whole));
    // An empty object has no part: it is complete as it begins.
    this.#lastSent = row.size === 0;
  }

  /** Every byte arrived and went to the bucket. */
  get complete(): boolean {
    return this.#lastSent;
  }

  #lengthOf(part: number): number {
    return Math.min(this.#partSize, this.#size - part * this.#partSize);
  }

  write(chunk: Uint8Array): boolean {
    if (this.#failed !== null) throw this.#failed;
    const at = this.#part * this.#partSize + this.#fill;
    if (at + chunk.byteLength > this.#size) throw lfsError('LFS_ERR_BODY_TOO_LARGE', `This PATCH goes past the upload's length of ${this.#size} bytes`);
    for (let used = 0; used < chunk.byteLength; ) {
      const n = Math.min(chunk.byteLength - used, this.#buf.byteLength - this.#fill);
      this.#buf.set(chunk.subarray(used, used + n), this.#fill); // uWS reuses the chunk once this returns
      this.#fill += n;
      used += n;
      if (this.#fill === this.#buf.byteLength) this.#seal();
    }
    if (this.#pending < 2) return true;
    this.#owed = true;
    return false;
  }

  /** The part buffer is full: hashed, then sent after the parts before it and recorded. */
  #seal(): void {
    const bytes = this.#buf;
    const part = this.#part;
    const last = (part + 1) * this.#partSize >= this.#size;
    this.#hash.update(bytes, noop);
    const state = last ? null : this.#hash.snapshot();
    state?.catch(noop);
    this.#pending++;
    this.#chain = this.#chain.then(async () => {
      await this.#parts.put(this.#name, part, bytes);
      if (state !== null) {
        const end = (part + 1) * this.#partSize;
        const states = new Uint8Array(this.#states.byteLength + STATE_BYTES);
        states.set(this.#states);
        states.set(await state, this.#states.byteLength);
        await this.#record(end, states);
        this.#states = states;
        this.#durable = end;
      } else {
        this.#lastSent = true;
      }
    });
    this.#chain
      .catch((e: unknown) => {
        this.#failed ??= e;
      })
      .finally(() => {
        this.#pending--;
        if (this.#owed && (this.#pending < 2 || this.#failed !== null)) {
          this.#owed = false;
          this.#drain?.();
        }
      });
    this.#part++;
    this.#fill = 0;
    if (!last) this.#buf = Buffer.allocUnsafe(this.#lengthOf(this.#part));
  }

  onDrain(listener: () => void): void {
    this.#drain = listener;
  }

  /** Waits for the parts sent; returns the durable offset. Throws their failure unless the PATCH failed anyway. */
  async settle(failed: boolean): Promise<number> {
    try {
      await this.#chain;
    } catch (e) {
      if (!failed) throw e;
    }
    if (!this.#lastSent) this.#hash.drop();
    return this.#durable;
  }

  digest(): Promise<string> {
    return this.#hash.digest();
  }

  finish(): Promise<PutResult> {
    return Promise.reject(new Error('a PATCH is completed with settle()'));
  }

  async abort(): Promise<void> {
    this.#failed ??= lfsError('LFS_ERR_UPLOAD_ABORTED');
  }
}

const noop = (): void => undefined;

/** A finished upload's parts, read back in order as the body of TransferService.upload; `sha256`: its digest, already checked. */
function partsBody(parts: PartStore, name: string, count: number, sha256: string): UploadBody {
  return {
    sha256,
    async into(writer: ObjectWriter): Promise<void> {
      let drained: (() => void) | null = null;
      writer.onDrain(() => drained?.());
      for (let part = 0; part < count; part++) {
        for await (const chunk of await parts.read(name, part)) {
          if (!writer.write(chunk)) await new Promise<void>((resolve) => (drained = resolve));
          drained = null;
        }
      }
    },
  };
}

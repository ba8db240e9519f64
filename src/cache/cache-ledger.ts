import type { Oid } from '../protocol/oid.js';
import type { DiskReserve } from '../store/disk-reserve.js';
import type { BlobStore } from '../store/types.js';

/** What the ledger tells the metrics. */
export interface LedgerEvents {
  evicted(bytes: number): void;
  /** An object was used: its last use is recorded where a restart finds it (the file's mtime). */
  used?(oid: Oid): void;
}

/** When each stored object was last used (ms since the epoch), read once at start. */
export type LastUse = (oid: Oid) => Promise<number>;

/**
 * Which objects the cache holds, least recently used first, within SVC_CACHE_MAX_SIZE and the disk
 * reserve. Built at start from the cache's store (a restart keeps what was cached, ordered by each
 * object's recorded last use), kept in memory after that. An object being served or filled is pinned and
 * never evicted; room for a fill is taken before its first byte is written and held until it lands
 * in the store or is given up.
 */
export class CacheLedger {
  readonly #store: Pick<BlobStore, 'delete' | 'list'>;
  readonly #maxSize: number;
  readonly #reserve: DiskReserve | null;
  readonly #events: LedgerEvents;
  /** Oid → size; Map order is recency (a touch moves an oid to the end). */
  readonly #entries = new Map<Oid, number>();
  readonly #pins = new Map<Oid, number>();
  #bytes = 0;
  /** Bytes promised to fills and uploads in flight. */
  #promised = 0;

  private constructor(store: Pick<BlobStore, 'delete' | 'list'>, maxSize: number, reserve: DiskReserve | null, events: LedgerEvents) {
    this.#store = store;
    this.#maxSize = maxSize;
    this.#reserve = reserve;
    this.#events = events;
  }

  /** `lastUse`: orders what the store holds by recency; without it, the listing's order. */
  static async open(store: Pick<BlobStore, 'delete' | 'list'>, maxSize: number, reserve: DiskReserve | null, events: LedgerEvents, lastUse?: LastUse): Promise<CacheLedger> {
    const ledger = new CacheLedger(store, maxSize, reserve, events);
    const found: { oid: Oid; size: number; at: number }[] = [];
    for await (const o of store.list()) found.push({ oid: o.oid, size: o.storedSize, at: lastUse === undefined ? 0 : await lastUse(o.oid).catch(() => 0) });
    // Stable: objects with the same recorded use keep the listing's order.
    found.sort((a, b) => a.at - b.at);
    for (const o of found) ledger.#add(o.oid, o.size);
    // A cap lowered since the last start: evict down to it now.
    await ledger.#evictUntil(0);
    return ledger;
  }

  /** SVC_CACHE_MAX_SIZE: an object larger than this passes through without being kept. */
  get maxSize(): number {
    return this.#maxSize;
  }

  /** Bytes the cached objects take. */
  get bytes(): number {
    return this.#bytes;
  }

  get count(): number {
    return this.#entries.size;
  }

  /** The cached object's size, its recency untouched; null when not cached. */
  sizeOf(oid: Oid): number | null {
    return this.#entries.get(oid) ?? null;
  }

  /** The cached object's size, marked as just used; null when not cached. */
  use(oid: Oid): number | null {
    const size = this.#entries.get(oid);
    if (size === undefined) return null;
    this.#entries.delete(oid);
    this.#entries.set(oid, size);
    this.#events.used?.(oid);
    return size;
  }

  /** Keeps `oid` from eviction until the returned function is called (once). */
  pin(oid: Oid): () => void {
    this.#pins.set(oid, (this.#pins.get(oid) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const n = this.#pins.get(oid)! - 1;
      if (n === 0) this.#pins.delete(oid);
      else this.#pins.set(oid, n);
    };
  }

  /**
   * Promises `size` bytes to a fill or upload, evicting the least recently used unpinned objects
   * for them; false when they do not fit (larger than the cap, or the disk's reserve reached with
   * nothing left to evict). The promise is kept by `add` or given back by the returned release.
   */
  async promise(size: number): Promise<(() => void) | null> {
    if (size > this.#maxSize) return null;
    if (!(await this.#evictUntil(size))) return null;
    this.#promised += size;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#promised -= size;
    };
  }

  /**
   * Room on disk for an object larger than the cap, streamed through a staging file and not kept:
   * evicts for the disk reserve only. Null when the reserve is reached with nothing left to evict.
   */
  async passThrough(size: number): Promise<(() => void) | null> {
    return (await this.#evictUntil(size, false)) ? () => undefined : null;
  }

  /** The object is in the store now (its promise, if any, released by the caller). */
  add(oid: Oid, size: number): void {
    if (!this.#entries.has(oid)) this.#add(oid, size);
    else this.use(oid);
  }

  #add(oid: Oid, size: number): void {
    this.#entries.set(oid, size);
    this.#bytes += size;
  }

  /** Evicts until `incoming` more bytes fit (`underCap`) under the cap and above the reserve; false if they cannot. */
  async #evictUntil(incoming: number, underCap = true): Promise<boolean> {
    const fits = (): boolean => (!underCap || this.#bytes + this.#promised + incoming <= this.#maxSize) && (this.#reserve?.admits(incoming, false) ?? true);
    while (!fits()) {
      const victim = this.#oldestUnpinned();
      if (victim === null) return false;
      const size = this.#entries.get(victim)!;
      this.#entries.delete(victim);
      this.#bytes -= size;
      // Readers already open keep reading the bytes they opened (BlobStore.delete).
      await this.#store.delete(victim).catch(() => false);
      this.#events.evicted(size);
    }
    return true;
  }

  #oldestUnpinned(): Oid | null {
    for (const oid of this.#entries.keys()) if (!this.#pins.has(oid)) return oid;
    return null;
  }
}

/**
 * The one bounded cache of svc: at most `maxEntries` entries and `maxBytes` estimated bytes, the
 * oldest evicted first. Used for compiled reads and parsed writes (src/query/cache.ts) and for
 * verified session tokens (src/auth/session.ts).
 *
 * A cache may forget anything at any time; a store that must not forget (the replay store of
 * used SSO states and SAML assertion ids, src/util/once.ts) is not a cache and does not use this:
 * it refuses new claims while it is full of unexpired ones.
 *
 * @module
 */

/**
 * How a hit moves its entry to the young end: `always` (exact LRU), `lazy` (only once half the
 * cache was inserted since its last move: a hot entry never becomes the oldest, and most hits cost
 * one lookup), `never` (first in, first out).
 */
export type Refresh = "always" | "lazy" | "never";

/** Limits and policy of a {@link BoundedCache}. */
export interface BoundedCacheOptions<K, V> {
  /** Most entries (0: the cache keeps nothing). */
  maxEntries: number;
  /** Most estimated bytes (default: no byte bound); an entry larger than this is not kept. */
  maxBytes?: number;
  /** Estimated bytes of an entry (default: 0). */
  bytes?: (key: K, value: V) => number;
  /** Default `always`. */
  refresh?: Refresh;
}

interface Entry<K, V> {
  key: K;
  value: V;
  bytes: number;
  /** Insertion count when the entry last moved to the young end. */
  at: number;
  /** Neighbours in age order (null at either end). */
  older: Entry<K, V> | null;
  younger: Entry<K, V> | null;
}

/**
 * A map bounded by entries and estimated bytes that evicts its oldest entries.
 *
 * The age order is a list through the entries, not the map's own order: a hit moves its entry
 * by relinking it, and the map changes only when an entry enters or leaves (a map deleted from and
 * added to on every hit keeps dead tables alive: src/util/indexed_list.ts says why).
 */
export class BoundedCache<K, V> {
  readonly #map = new Map<K, Entry<K, V>>();
  readonly #maxEntries: number;
  readonly #maxBytes: number;
  readonly #size: (key: K, value: V) => number;
  readonly #refresh: Refresh;
  #bytes = 0;
  #inserted = 0;
  #oldest: Entry<K, V> | null = null;
  #youngest: Entry<K, V> | null = null;

  /** A cache with the given limits and policy. */
  constructor(opts: BoundedCacheOptions<K, V>) {
    this.#maxEntries = opts.maxEntries;
    this.#maxBytes = opts.maxBytes ?? Infinity;
    this.#size = opts.bytes ?? (() => 0);
    this.#refresh = opts.refresh ?? "always";
  }

  /** The value cached for `key` (moved to the young end as the policy says). */
  get(key: K): V | undefined {
    const hit = this.#map.get(key);
    if (hit === undefined) return undefined;
    const refresh = this.#refresh;
    if (
      hit !== this.#youngest &&
      (refresh === "always" ||
        (refresh === "lazy" && this.#inserted - hit.at > this.#maxEntries / 2))
    ) {
      this.#unlink(hit);
      this.#append(hit);
      hit.at = this.#inserted;
    }
    return hit.value;
  }

  /** Caches `value` for `key`, evicting the oldest entries to stay within the limits. */
  set(key: K, value: V): void {
    const bytes = this.#size(key, value);
    if (this.#maxEntries === 0 || bytes > this.#maxBytes) return;
    this.delete(key);
    while (
      this.#oldest !== null &&
      (this.#map.size >= this.#maxEntries || this.#bytes + bytes > this.#maxBytes)
    ) {
      this.delete(this.#oldest.key);
    }
    const e: Entry<K, V> = {
      key,
      value,
      bytes,
      at: ++this.#inserted,
      older: null,
      younger: null,
    };
    this.#map.set(key, e);
    this.#append(e);
    this.#bytes += bytes;
  }

  /** Forgets `key`; true when it was cached. */
  delete(key: K): boolean {
    const old = this.#map.get(key);
    if (old === undefined) return false;
    this.#map.delete(key);
    this.#unlink(old);
    this.#bytes -= old.bytes;
    return true;
  }

  #append(e: Entry<K, V>): void {
    e.older = this.#youngest;
    e.younger = null;
    if (this.#youngest) this.#youngest.younger = e;
    else this.#oldest = e;
    this.#youngest = e;
  }

  #unlink(e: Entry<K, V>): void {
    if (e.older) e.older.younger = e.younger;
    else this.#oldest = e.younger;
    if (e.younger) e.younger.older = e.older;
    else this.#youngest = e.older;
    e.older = e.younger = null;
  }

  /** Forgets everything. */
  clear(): void {
    this.#map.clear();
    this.#oldest = this.#youngest = null;
    this.#bytes = 0;
  }

  /** Entries held. */
  get size(): number {
    return this.#map.size;
  }

  /** Estimated bytes held. */
  get bytes(): number {
    return this.#bytes;
  }
}

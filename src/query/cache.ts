/**
 * The query stage's caches, both emptied when a reload swaps the state and both a
 * {@link BoundedCache}: compiled plain reads (a repeated request skips parsing, validation and
 * SQL generation) and parsed write queries (a repeated write skips parsing and validating its
 * query; its SQL per payload shape is cached on the parsed tree, see src/write/compile.ts).
 *
 * @module
 */
import type { RelationNode, Statement } from "../compile/ast.ts";
import type { AppState } from "../state/runtime.ts";
import { BoundedCache, type BoundedCacheOptions } from "../util/bounded_cache.ts";
import type { ReadRecord } from "./context.ts";

/** Requests longer than this are not cached. */
export const CACHE_MAX_KEY = 4096;

/** A compiled plain read and how it is read (one fetch batch or a cursor, where its cap is). */
export interface CachedRead extends Statement {
  /**
   * How it is read: its size class, the row cap svc's client enforces (none: in its SQL) and what
   * its last run answered (updated by each run).
   */
  read: { small: boolean; maxRowBytes?: number; seen?: ReadRecord };
  /** Whether it may run on a read replica (no node calls a VOLATILE function). */
  replica?: boolean;
}

/** A {@link BoundedCache} bound to one state: a new state empties it first. */
export class StateCache<V> {
  #state: AppState | null = null;
  readonly #cache: BoundedCache<string, V>;

  /** A cache with the given limits and policy. */
  constructor(opts: BoundedCacheOptions<string, V>) {
    this.#cache = new BoundedCache(opts);
  }

  /** The value cached for `key` under `state` (a new state empties the cache first). */
  get(state: AppState, key: string): V | undefined {
    if (state !== this.#state) {
      this.#state = state;
      this.#cache.clear();
      return undefined;
    }
    return this.#cache.get(key);
  }

  /** Caches `value` for `key`, evicting the oldest entries to stay within bounds. */
  set(key: string, value: V): void {
    this.#cache.set(key, value);
  }

  /** Entries and their estimated bytes. */
  stats(): { size: number; bytes: number } {
    return { size: this.#cache.size, bytes: this.#cache.bytes };
  }
}

/**
 * Compiled plain reads by (state, role, request text). Bounded by entries and by estimated bytes
 * ({@link readCacheEntryBytes}), nearly LRU (a hit moves its entry to the young end only once half
 * the cache was inserted since its last move).
 */
export class ReadCache extends StateCache<CachedRead> {
  /** A cache of at most `max` entries and `maxBytes` estimated bytes. */
  constructor(readonly max = 1000, readonly maxBytes = 8 * 1024 * 1024) {
    super({ maxEntries: max, maxBytes, bytes: readCacheEntryBytes, refresh: "lazy" });
  }
}

/**
 * Estimated memory of a read-cache entry: key and SQL text (one byte per character), the bound
 * values (their text never exceeds the key's, which holds them), and a fixed overhead.
 */
export function readCacheEntryBytes(key: string, stmt: Statement): number {
  return 2 * key.length + stmt.sql.length + 16 * stmt.params.length + 256;
}

/** The process's compiled-read cache. */
export const readCache: ReadCache = new ReadCache();

/**
 * Parsed write queries by (state, role, pointer, query text), at most 256, the oldest out first.
 */
export const writeQueries: StateCache<RelationNode> = new StateCache<RelationNode>({
  maxEntries: 256,
  refresh: "never",
});

/**
 * A list of entries that come and go all the time (the requests in flight, their deadlines), in
 * no order: an array whose entries know their place, so adding and removing are O(1) and removal
 * moves the last entry into the gap.
 *
 * Not a Set or Map: one that entries enter and leave all the time replaces its hash table every
 * few changes, and V8 links each replaced table to its successor while it keeps the entries it
 * held. Once a table is in the old generation (a mark-compact promotes the live one), that chain
 * keeps every later table, and the requests they held, alive through scavenges: the client watch's
 * Set promoted ≈ 300 KB per scavenge at 50 connections (docs/performance.md, "Garbage
 * collection"; tests/util/retention_test.ts).
 *
 * @module
 */

/** An entry of an {@link IndexedList}: its place there, -1 while in none (one list at a time). */
export interface Indexed {
  i: number;
}

/** Entries that know their place in it; see the module documentation. */
export class IndexedList<T extends Indexed> {
  /** The entries, in no order (read-only for callers: change it through the methods). */
  readonly items: T[] = [];

  /** Adds `e` (which must be in no list). */
  add(e: T): void {
    e.i = this.items.push(e) - 1;
  }

  /** Removes `e`; nothing when it is in no list (idempotent). */
  remove(e: T): void {
    const i = e.i;
    if (i < 0) return;
    e.i = -1;
    const last = this.items.pop()!;
    if (last !== e) {
      this.items[i] = last;
      last.i = i;
    }
  }

  /** Removes every entry. */
  clear(): void {
    for (const e of this.items) e.i = -1;
    this.items.length = 0;
  }
}

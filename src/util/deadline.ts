/**
 * Coarse deadlines for hot paths: one shared timer sweeps every {@link SWEEP_MS} over the deadlines
 * in force, instead of a timer (and usually a promise race) per request. Measured on a
 * primary-key read, per-request timers and races cost a few percent of svc's CPU. A deadline fires
 * between its time and one sweep later.
 *
 * @module
 */
import { IndexedList } from "./indexed_list.ts";

/** How often the shared timer looks at the deadlines in force, in milliseconds. */
export const SWEEP_MS = 100;

/** A deadline in force. */
export interface Deadline {
  /** Moves the deadline to `ms` from now (e.g. a body read that made progress). */
  extend(ms: number): void;
  /** Withdraws the deadline (the work finished in time); idempotent. */
  clear(): void;
}

/** A deadline in force: one object per deadline (no closures). */
class Entry implements Deadline {
  /** Its place in {@link entries}; -1 once withdrawn or fired. */
  i = -1;

  constructor(public at: number, readonly expire: () => void) {}

  extend(ms: number): void {
    this.at = performance.now() + ms;
  }

  clear(): void {
    entries.remove(this);
  }
}

/** The deadlines in force (src/util/indexed_list.ts: not a Set, which requests churn). */
const entries = new IndexedList<Entry>();
let sweeper: ReturnType<typeof setInterval> | undefined;

function sweep(): void {
  const items = entries.items;
  if (items.length === 0) {
    clearInterval(sweeper);
    sweeper = undefined;
    return;
  }
  const now = performance.now();
  let due: Entry[] | null = null;
  for (let i = 0; i < items.length; i++) {
    if (items[i].at <= now) (due ??= []).push(items[i]);
  }
  if (due === null) return;
  // Fired after the scan: an expiry may withdraw or extend another deadline, or add one.
  for (const e of due) {
    if (e.i < 0 || e.at > now) continue;
    entries.remove(e);
    e.expire();
  }
}

/** Calls `expire` once, about `ms` from now, unless the deadline is cleared first. */
export function deadline(ms: number, expire: () => void): Deadline {
  const e = new Entry(performance.now() + ms, expire);
  entries.add(e);
  if (sweeper === undefined) {
    sweeper = setInterval(sweep, SWEEP_MS);
    Deno.unrefTimer(sweeper);
  }
  return e;
}

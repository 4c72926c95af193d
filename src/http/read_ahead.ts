/**
 * The read-ahead budget: bytes of streamed answers a worker holds for clients too slow for a busy
 * pool. A streamed answer keeps its pooled connection (its transaction and portal are open) while
 * its client takes the chunks; when the client takes nothing for `pg.stall_timeout` seconds while
 * other requests wait for a connection, the pool asks the answer to let go of it
 * (src/db/pool.ts `Lease.waitClient`): the rest of the answer is read ahead into memory, within
 * this budget, the transaction ends and the connection goes back to the pool. An answer that does
 * not fit what is left of the budget is ended instead (the client sees it truncated). A read-ahead
 * answer whose client then takes nothing for `http.send_timeout` seconds is ended too, giving its
 * bytes back. See docs/http.md, "Slow clients".
 *
 * @module
 */
import { log } from "../observe/log.ts";
import { metrics } from "../observe/metrics.ts";

/** The read-ahead budget of this worker (one JavaScript isolate). */
class ReadAheadBudget {
  /** Bytes that may be held (`http.read_ahead`); 0: answers are never read ahead. */
  limit = 32 * 1024 * 1024;
  /** Milliseconds a read-ahead answer may wait for its client to take a chunk (`http.send_timeout`). */
  idleMs = 60_000;
  /** Bytes held now. */
  used = 0;

  /** Takes `n` bytes when that many are left; returns whether it did. */
  tryTake(n: number): boolean {
    if (this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }

  /** Takes up to `n` bytes of the budget; returns how many it got (0 when it is spent). */
  take(n: number): number {
    const got = Math.max(0, Math.min(n, this.limit - this.used));
    this.used += got;
    return got;
  }

  /** Takes `n` bytes whatever is left (a fetch's first row may pass what was taken for it). */
  force(n: number): void {
    this.used += n;
  }

  /** Gives `n` bytes back. */
  give(n: number): void {
    this.used = Math.max(0, this.used - n);
  }
}

/** This worker's read-ahead budget ({@link configureReadAhead} sets it from the configuration). */
export const readAhead: ReadAheadBudget = new ReadAheadBudget();

/** Sets the budget (`http.read_ahead`, bytes) and the idle limit (`http.send_timeout`, seconds). */
export function configureReadAhead(bytes: number, sendTimeout: number): void {
  readAhead.limit = Math.max(0, bytes);
  readAhead.idleMs = Math.max(1, sendTimeout) * 1000;
}

/** A streamed answer ended because its client was too slow (the client sees it truncated). */
export class SlowClientError extends Error {
  override name = "SlowClientError";
}

/** Logs and counts an answer read ahead of its slow client. */
export function readingAhead(requestId: string | undefined): void {
  metrics.slowClients.inc({ outcome: "read_ahead" });
  log.info("a streamed answer's client is slow while requests wait: reading the rest ahead", {
    request_id: requestId,
  });
}

/** Logs and counts an answer ended for its slow client; the error to end its stream with. */
export function slowClientEnded(why: string, requestId: string | undefined): SlowClientError {
  metrics.slowClients.inc({ outcome: "ended" });
  log.warn("a streamed answer was ended: {why}", { why, request_id: requestId });
  return new SlowClientError(`the answer was ended: ${why}`);
}

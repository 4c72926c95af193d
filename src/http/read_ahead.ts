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

/**
 * One answer's bytes held in the budget while it is read ahead of its client, and the watch that
 * ends it when the client then takes nothing for `http.send_timeout` (`onIdle` gets the error to
 * end it with). Used by both kinds of streamed answer (src/http/answer_body.ts, cursor_answer.ts).
 */
export class ReadAheadHold {
  #held = 0;
  #readAt = Date.now();
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly requestId: string | undefined,
    readonly onIdle: (e: SlowClientError) => void,
  ) {}

  /** Starts holding the `queued` bytes and watching; false when they do not fit the budget. */
  start(queued: number): boolean {
    if (!this.tryHold(queued)) return false;
    readingAhead(this.requestId);
    this.#watch(readAhead.idleMs);
    return true;
  }

  /** Holds `n` more bytes when they fit the budget; returns whether it did. */
  tryHold(n: number): boolean {
    if (!readAhead.tryTake(n)) return false;
    this.#held += n;
    return true;
  }

  /** Holds `n` more bytes whatever is left (a fetch's first row may pass what was taken for it). */
  force(n: number): void {
    readAhead.force(n);
    this.#held += n;
  }

  /** The client read: `n` bytes it took are given back. */
  took(n: number): void {
    this.#readAt = Date.now();
    if (n === 0) return;
    readAhead.give(n);
    this.#held -= n;
  }

  /** Gives every held byte back and stops watching (the answer ended or was taken). */
  release(): void {
    if (this.#held) readAhead.give(this.#held);
    this.#held = 0;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The error ending the answer for `why` (logged and counted). */
  ended(why: string): SlowClientError {
    return slowClientEnded(why, this.requestId);
  }

  #watch(ms: number): void {
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      const left = this.#readAt + readAhead.idleMs - Date.now();
      if (left > 0) return this.#watch(left);
      this.onIdle(this.ended("its client took nothing for http.send_timeout"));
    }, ms);
    Deno.unrefTimer(this.#timer);
  }
}

/** A streamed answer ended because its client was too slow (the client sees it truncated). */
export class SlowClientError extends Error {
  override name = "SlowClientError";
}

/** Logs and counts an answer read ahead of its slow client. */
function readingAhead(requestId: string | undefined): void {
  metrics.slowClients.inc({ outcome: "read_ahead" });
  log.info("a streamed answer's client is slow while requests wait: reading the rest ahead", {
    request_id: requestId,
  });
}

/** Logs and counts an answer ended for its slow client; the error to end its stream with. */
function slowClientEnded(why: string, requestId: string | undefined): SlowClientError {
  metrics.slowClients.inc({ outcome: "ended" });
  log.warn("a streamed answer was ended: {why}", { why, request_id: requestId });
  return new SlowClientError(`the answer was ended: ${why}`);
}
